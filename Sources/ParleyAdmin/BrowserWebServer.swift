import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import ParleyBasics
import ParleyRelay
import ParleyWire

/// The relay's web port, for people in a browser: the page (`GET /join`, ``BrowserPage``) and
/// its signalling, the offer in the shape of WHIP (RFC 9725):
///
/// - `POST /whip` with the SDP offer (`application/sdp`) and `Authorization: Bearer <token>`:
///   `201 Created`, the SDP answer, `Location: /whip/<id>`, and the call's signalling key in
///   `Parley-Signal-Key`; a token that does not verify is refused (401/403) before the relay
///   keeps anything.
/// - `GET /whip/<id>/signal` upgraded to a WebSocket, the key in `Sec-WebSocket-Protocol`
///   (``BrowserSignalling``): what the relay tells the member, pushed as it happens, and the
///   page's requests (mute state, texts, moderation), answered on it.
/// - `DELETE /whip/<id>` with `Authorization: Bearer <key>` (or the token the call was
///   offered with, as a WHIP client sends): the page leaves.
///
/// The id only names the call and may reach a proxy's log; the key proves the request is the
/// page's, and travels only in headers. Connections are limited as the admin port's are
/// (``AdminConnections``) until they become a signalling socket. Serve it over HTTPS in front
/// (a reverse proxy that passes WebSockets): browsers give the microphone only to secure
/// origins, which 127.0.0.1 is.
public final class BrowserWebServer: Sendable {
    let channel: Channel
    private let group: MultiThreadedEventLoopGroup

    /// The largest body: an offer with a few dozen sections.
    static let maximumBodyBytes = 64 * 1024

    /// Binds `address` and serves `relay`'s browser members, on an event loop of its own.
    public static func start(serving relay: Relay, at address: HostAndPort, logger: Logger) throws -> BrowserWebServer {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let connections = AdminConnections()
        do {
            let channel = try ServerBootstrap(group: group)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { [weak relay] channel in
                    connections.opened(channel)
                    return channel.eventLoop.makeCompletedFuture {
                        // A signalling socket leaves the HTTP handler and the connection limit
                        // for plain requests behind (at most one per member, which the proof bounds).
                        let upgrade: NIOHTTPServerUpgradeConfiguration = (
                            upgraders: [BrowserSignalling.upgrader(relay: relay)],
                            completionHandler: { context in
                                context.pipeline.removeHandler(name: BrowserWebHandler.name, promise: nil)
                                connections.upgraded(context.channel)
                            })
                        try channel.pipeline.syncOperations.configureHTTPServerPipeline(withServerUpgrade: upgrade, withErrorHandling: true)
                        try channel.pipeline.syncOperations.addHandler(BrowserWebHandler(relay: relay, connections: connections), name: BrowserWebHandler.name)
                    }
                }
                .childChannelOption(.socketOption(.so_reuseaddr), value: 1)
                // What a signalling socket may hold of events its page has not read yet.
                .childChannelOption(.writeBufferWaterMark, value: .init(low: BrowserSignalling.writeBufferLowWater,
                                                                          high: BrowserSignalling.writeBufferHighWater))
                .bind(to: try address.socketAddress())
                .wait()
            let server = BrowserWebServer(channel: channel, group: group)
            logger.info("web port listening: browsers join at /join", metadata: [
                "http": "\(channel.localAddress.map { HostPortText.format(host: $0.ipAddress ?? "?", port: $0.port) } ?? "?")",
            ])
            return server
        } catch {
            try? group.syncShutdownGracefully()
            throw error
        }
    }

    init(channel: Channel, group: MultiThreadedEventLoopGroup) {
        self.channel = channel
        self.group = group
    }

    public var localAddress: SocketAddress? { channel.localAddress }

    /// Stops listening and closes every connection. Called after the relay's shutdown: the
    /// goodbyes it gave browser members are written to their sockets first (they wait on this
    /// loop, in order), so a page hears that the relay went away, not only that it vanished.
    public func close() {
        try? channel.eventLoop.submit {}.wait()
        try? channel.close().wait()
        try? group.syncShutdownGracefully()
    }
}

/// One connection of the web port: a request at a time, each answered from the relay.
final class BrowserWebHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    static let name = "parley-web"

    private weak var relay: Relay?
    private let exchange: HTTPExchange
    private var request: HTTPRequestHead?
    /// The body so far; nil once it grew past the limit (answered 413, closing).
    private var body: [UInt8]? = []

    init(relay: Relay?, connections: AdminConnections) {
        self.relay = relay
        exchange = HTTPExchange(connections: connections)
    }

    func handlerAdded(context: ChannelHandlerContext) { exchange.awaitRequest(context: context) }

    func handlerRemoved(context: ChannelHandlerContext) { exchange.cancel() }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case let .head(head):
            request = head
            body = []
        case var .body(part):
            guard let head = request, body != nil else { return }
            if body!.count + part.readableBytes > BrowserWebServer.maximumBodyBytes {
                body = nil
                var closing = head
                closing.headers.replaceOrAdd(name: "Connection", value: "close")
                send(.payloadTooLarge, text: "the request is larger than \(BrowserWebServer.maximumBodyBytes) bytes", head: closing, context: context)
            } else {
                body!.append(contentsOf: part.readBytes(length: part.readableBytes) ?? [])
            }
        case .end:
            exchange.requestArrived(context: context)
            guard let head = request, let received = body else { return }
            request = nil
            body = []
            respond(to: head, body: received, context: context)
        }
    }

    private func respond(to head: HTTPRequestHead, body: [UInt8], context: ChannelHandlerContext) {
        let parts = head.uri.split(separator: "?", maxSplits: 1)
        let path = parts.first.map(String.init) ?? head.uri
        let query = parts.count > 1 ? String(parts[1]) : ""
        guard let relay else { return send(.serviceUnavailable, text: "the relay has stopped", head: head, context: context) }
        let segments = path.split(separator: "/").map(String.init)
        switch (head.method, segments.count, segments.first) {
        case (.GET, 1, "join"), (.HEAD, 1, "join"):
            send(.ok, body: Array(BrowserPage.html.utf8), type: "text/html; charset=utf-8", head: head, context: context,
                 extraHeaders: [("Cache-Control", "no-store"), ("Content-Security-Policy", BrowserPage.contentSecurityPolicy),
                                ("Referrer-Policy", "no-referrer")])
        case (.GET, 1, BrowserEndToEndScripts.libraryName), (.HEAD, 1, BrowserEndToEndScripts.libraryName):
            // The page's end-to-end encryption (HPKE, SFrame, keys), loaded by the page and by its worker.
            send(.ok, body: Array(BrowserEndToEndScripts.library.utf8), type: "text/javascript; charset=utf-8", head: head, context: context,
                 extraHeaders: [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff")])
        case (.GET, 1, BrowserEndToEndScripts.workerName), (.HEAD, 1, BrowserEndToEndScripts.workerName):
            // The encoded-transform worker: seals and opens each frame, off the page's thread.
            send(.ok, body: Array(BrowserEndToEndScripts.worker.utf8), type: "text/javascript; charset=utf-8", head: head, context: context,
                 extraHeaders: [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"),
                                ("Content-Security-Policy", BrowserEndToEndScripts.workerContentSecurityPolicy)])
        case (.POST, 1, "whip"):
            acceptOffer(head: head, body: body, relay: relay, context: context)
        case (.GET, 3, "whip") where segments[2] == "signal":
            // An upgrade the socket refused, or no upgrade at all: say which.
            switch BrowserSignalling.admit(head, relay: relay) {
            case let .failure(refusal):
                send(refusal.status, text: refusal.message, head: head, context: context)
            case .success:
                send(.upgradeRequired, text: "the call's signalling is a WebSocket", head: head, context: context,
                     extraHeaders: [("Upgrade", "websocket")])
            }
        case (.DELETE, 2, "whip"):
            guard let member = relay.browserMember(id: segments[1]) else { return gone(head: head, context: context) }
            guard let presented = Self.bearer(head), member.matchesSignallingKey(presented) || member.matchesToken(presented) else {
                return send(.forbidden, text: "send the call's key (or its token) as Authorization: Bearer", head: head, context: context)
            }
            member.leave()
            send(.ok, text: "left", head: head, context: context)
        default:
            send(.notFound, text: "not found; open /join with an invite", head: head, context: context)
        }
    }

    /// WHIP's POST: the token from `Authorization: Bearer`, checked before the offer is read.
    private func acceptOffer(head: HTTPRequestHead, body: [UInt8], relay: Relay, context: ChannelHandlerContext) {
        guard let token = Self.bearer(head) else {
            return send(.unauthorized, text: "send the invite's token as Authorization: Bearer <token>", head: head, context: context,
                        extraHeaders: [("WWW-Authenticate", "Bearer")])
        }
        let contentType = head.headers.first(name: "Content-Type")?.lowercased() ?? ""
        guard contentType.hasPrefix("application/sdp") else {
            return send(.unsupportedMediaType, text: "send the offer as application/sdp", head: head, context: context)
        }
        // The operator's --public-address, when given, is the candidate whatever the page came
        // through; else a relay bound to one address names it (the way through a reverse proxy here).
        guard let candidateHost = relay.configuration.browserCandidate?.host ?? relay.listenHostForBrowsers
            ?? Self.candidateHost(hostHeader: head.headers.first(name: "Host") ?? "", localAddress: context.channel.localAddress?.ipAddress) else {
            return send(.serviceUnavailable, text: "the relay does not know which address browsers reach its UDP port at (the page came "
                + "through a proxy on this machine): whoever runs it should give --listen the relay's public address, not 0.0.0.0, or --public-address",
                head: head, context: context)
        }
        // The page's identity key (base64url), sent when it can take part in end-to-end
        // encryption; the relay only repeats it in the roster.
        var identityKey: [UInt8]?
        if let text = head.headers.first(name: "Parley-Identity-Key") {
            guard text.utf8.count <= 64, let key = Base64URL.decode(text) else {
                return send(.badRequest, text: "Parley-Identity-Key is not base64url", head: head, context: context)
            }
            identityKey = key
        }
        switch relay.acceptBrowserOffer(String(decoding: body, as: UTF8.self), token: token, candidateHost: candidateHost, identityKey: identityKey) {
        case let .failure(refusal):
            send(HTTPResponseStatus(statusCode: refusal.status), text: refusal.message, head: head, context: context)
        case let .success(member):
            send(.created, body: Array(member.answer.utf8), type: "application/sdp", head: head, context: context,
                 extraHeaders: [("Location", "/whip/\(member.id)"), ("Parley-Signal-Key", member.signallingKey), ("Cache-Control", "no-store")])
        }
    }

    /// The credential of `Authorization: Bearer <credential>`, if there is one.
    static func bearer(_ head: HTTPRequestHead) -> String? {
        guard let authorization = head.headers.first(name: "Authorization"), authorization.lowercased().hasPrefix("bearer ") else { return nil }
        let credential = authorization.dropFirst("bearer ".count).trimmingCharacters(in: .whitespaces)
        return credential.isEmpty ? nil : credential
    }

    private func gone(head: HTTPRequestHead, context: ChannelHandlerContext) {
        send(.notFound, text: "no such call: it ended, or never started; reload the page to join again", head: head, context: context)
    }

    static func queryValue(_ name: String, in query: String) -> String? {
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0] == name { return String(parts[1]) }
        }
        return nil
    }

    /// The host of a Host header ("relay.example.org:8443", "[::1]:8080"): an IP literal only,
    /// since the answer's ICE candidate must be an address, not a name.
    /// The address a browser reaches the UDP port at, when the relay listens on every interface
    /// (a relay that listens on one address names that one itself): the Host the page was
    /// loaded from if it is an address; for a DNS name, the address the page's connection
    /// arrived at, the relay's own as the browser reached it. Nil when that is loopback but the
    /// page was not loaded from this machine: a proxy here passed it on, and the relay cannot
    /// know its public address (the operator names it with `--listen`).
    static func candidateHost(hostHeader: String, localAddress: String?) -> String? {
        if let host = host(ofHostHeader: hostHeader) { return host }
        guard let local = localAddress.map(unmapped) else { return nil }
        let isLoopback = local == "::1" || local.hasPrefix("127.")
        let pageHost = (try? HostPortText(parsing: hostHeader)).map { String($0.host).lowercased() }
        return isLoopback && pageHost != "localhost" ? nil : local
    }

    /// An IPv4 address seen through a dual-stack socket (`::ffff:a.b.c.d`) as IPv4.
    static func unmapped(_ address: String) -> String {
        address.lowercased().hasPrefix("::ffff:") && address.contains(".") ? String(address.dropFirst(7)) : address
    }

    static func host(ofHostHeader header: String) -> String? {
        guard let split = try? HostPortText(parsing: header) else { return nil }
        let host = String(split.host)
        guard (try? SocketAddress(ipAddress: host, port: 0)) != nil else { return nil }
        return host
    }

    private func send(_ status: HTTPResponseStatus, text: String, head: HTTPRequestHead, context: ChannelHandlerContext,
                      extraHeaders: [(String, String)] = []) {
        send(status, body: Array((text + "\n").utf8), type: "text/plain; charset=utf-8", head: head, context: context, extraHeaders: extraHeaders)
    }

    private func send(_ status: HTTPResponseStatus, body: [UInt8], type: String, head: HTTPRequestHead, context: ChannelHandlerContext,
                      extraHeaders: [(String, String)] = []) {
        exchange.send(status, body: body, type: type, head: head, context: context, extraHeaders: [("X-Content-Type-Options", "nosniff")] + extraHeaders)
    }
}

/// `parley-relay serve`'s setting for the web port.
public struct WebSettings: Sendable, Equatable {
    /// Where the join page and browsers' signalling listen; nil (the default) turns browsers off.
    public var address: HostAndPort?

    public init() {}

    public static let settings: [Setting<WebSettings>] = [
        Setting(key: "web", help: "HTTP address for the browser page (/join) and its signalling, HOST:PORT, or 'off' (the default)") { settings, text throws(ConfigurationError) in
            settings.address = text == "off" ? nil : try HostAndPort(parsing: text)
        },
    ]

    public static var keys: [String] { settings.map(\.key) }

    public static func resolve(_ layers: ConfigurationLayers) throws(ConfigurationError) -> WebSettings {
        var settings = WebSettings()
        try layers.apply(Self.settings, to: &settings)
        return settings
    }
}
