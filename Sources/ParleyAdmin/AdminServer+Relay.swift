import Logging
import NIOCore
import NIOPosix
import ParleyBasics
import ParleyRelay

extension AdminServer {
    /// Serves `relay` at `address`: its metrics, its health (200 while it runs, 503 once it
    /// shuts down), and the admin API with `token` (none: the API answers that it is off),
    /// on an event loop of the server's own. Close it after the relay's shutdown.
    public static func start(serving relay: Relay, at address: HostAndPort, token: AdminToken?, logger: Logger) throws -> AdminServer {
        if token == nil {
            logger.notice("""
                the admin API is off: the secret file has no admin-token line; /metrics and /healthz still answer. \
                To turn it on, make a new secret file with `parley-relay keygen --out FILE --force` (old tokens stop working), \
                or add a line `admin-token = <32 or more random characters>` to it and restart
                """)
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        do {
            let server = try start(
                address: try address.socketAddress(), group: group,
                metrics: { [weak relay] in relay?.metricsExposition(on: loop) ?? loop.makeSucceededFuture([]) },
                healthy: { [weak relay] in relay?.isRunning ?? false },
                token: token,
                admin: { [weak relay] route, loop in
                    guard let relay else { return loop.makeSucceededFuture(.error(503, "the relay has stopped")) }
                    return answer(route, from: relay, on: loop)
                },
                logger: logger)
            logger.info("admin port listening", metadata: ["http": "\(server.localAddress.map { HostPortText.format(host: $0.ipAddress ?? "?", port: $0.port) } ?? "?")"])
            return AdminServer(channel: server.channel, ownGroup: group)
        } catch {
            try? group.syncShutdownGracefully()
            throw error
        }
    }

    /// An authorised admin API request, answered on `loop` (the server's).
    static func answer(_ route: AdminAPI.Route, from relay: Relay, on loop: any EventLoop) -> EventLoopFuture<AdminAPI.Response> {
        switch route {
        case .rooms:
            return relay.roomsReport(on: loop).map { AdminAPI.Response.json(200, $0) }
        case let .moderate(request, room):
            return loop.makeSucceededFuture(AdminAPI.response(to: relay.moderate(request, in: room)))
        }
    }
}

/// `parley-relay serve`'s setting for the admin port.
public struct AdminSettings: Sendable, Equatable {
    /// Where /metrics, /healthz and the admin API listen; nil turns the admin port off.
    public var address: HostAndPort? = HostAndPort(host: "127.0.0.1", port: 9800)

    public init() {}

    public static let settings: [Setting<AdminSettings>] = [
        Setting(key: "admin", help: "HTTP address for /metrics, /healthz and the admin API, HOST:PORT, or 'off'") { settings, text throws(ConfigurationError) in
            settings.address = text == "off" ? nil : try HostAndPort(parsing: text)
        },
    ]

    public static var keys: [String] { settings.map(\.key) }

    public static func resolve(_ layers: ConfigurationLayers) throws(ConfigurationError) -> AdminSettings {
        var settings = AdminSettings()
        try layers.apply(Self.settings, to: &settings)
        return settings
    }
}
