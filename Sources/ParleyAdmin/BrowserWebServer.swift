import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ParleyBasics
import ParleyRelay
import ParleyWire

/// The relay's web port, for people in a browser: the page (`GET /join`, ``BrowserPage``) and
/// its signalling in the shape of WHIP (RFC 9725):
///
/// - `POST /whip` with the SDP offer (`application/sdp`) and `Authorization: Bearer <token>`:
///   `201 Created`, the SDP answer, and `Location: /whip/<id>`; a token that does not verify is
///   refused (401/403) before the relay keeps anything.
/// - `GET /whip/<id>/events?after=N`: what the relay told the member since event N (joined,
///   connected, the roster, texts, errors, ended) as JSON, and the next N.
/// - `POST /whip/<id>/state` with `{"muted": true, "deafened": false}`: the mute, deafen and
///   push-to-talk controls.
/// - `POST /whip/<id>/text` with `{"text": "…"}`: a text for the room, as `parley`'s `say`.
/// - `POST /whip/<id>/moderate` with `{"action": "server_mute", "target": "bob"}` (or
///   `server_unmute`, `kick`): a moderator's request, which the relay checks against the
///   member's token like any member's; its answer arrives as an event.
/// - `DELETE /whip/<id>`: the page leaves.
///
/// The id is 128 random bits only the page that posted the offer knows. Connections are
/// limited as the admin port's are (``AdminConnections``). Serve it over HTTPS in front (a
/// reverse proxy): browsers give the microphone only to secure origins, which 127.0.0.1 is.
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
                        try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                        try channel.pipeline.syncOperations.addHandler(BrowserWebHandler(relay: relay, connections: connections))
                    }
                }
                .childChannelOption(.socketOption(.so_reuseaddr), value: 1)
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

    public func close() {
        try? channel.close().wait()
        try? group.syncShutdownGracefully()
    }
}

/// One connection of the web port: a request at a time, each answered from the relay.
final class BrowserWebHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

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
        case (.POST, 1, "whip"):
            acceptOffer(head: head, body: body, relay: relay, context: context)
        case (.GET, 3, "whip") where segments[2] == "events":
            guard let member = relay.browserMember(id: segments[1]) else { return gone(head: head, context: context) }
            let after = Self.queryValue("after", in: query).flatMap(Int.init) ?? 0
            let (events, next) = member.events(after: max(0, after))
            let answer = EventsAnswer(next: next, events: events)
            let json = (try? JSONEncoder().encode(answer)).map(Array.init) ?? Array("{}".utf8)
            send(.ok, body: json, type: "application/json", head: head, context: context, extraHeaders: [("Cache-Control", "no-store")])
        case (.POST, 3, "whip") where segments[2] == "state":
            guard let member = relay.browserMember(id: segments[1]) else { return gone(head: head, context: context) }
            guard let state = try? JSONDecoder().decode(StateRequest.self, from: Data(body)) else {
                return send(.badRequest, text: "send {\"muted\": true or false, \"deafened\": true or false}", head: head, context: context)
            }
            if member.setState(muted: state.muted, deafened: state.deafened ?? false) {
                send(.noContent, body: [], type: "text/plain", head: head, context: context)
            } else {
                send(.conflict, text: "the call is not connected yet", head: head, context: context)
            }
        case (.POST, 3, "whip") where segments[2] == "text":
            guard let member = relay.browserMember(id: segments[1]) else { return gone(head: head, context: context) }
            guard let request = try? JSONDecoder().decode(TextRequest.self, from: Data(body)) else {
                return send(.badRequest, text: "send {\"text\": \"…\"}", head: head, context: context)
            }
            if let problem = member.say(request.text) {
                send(.unprocessableEntity, text: problem, head: head, context: context)
            } else {
                send(.noContent, body: [], type: "text/plain", head: head, context: context)
            }
        case (.POST, 3, "whip") where segments[2] == "moderate":
            guard let member = relay.browserMember(id: segments[1]) else { return gone(head: head, context: context) }
            guard let request = try? JSONDecoder().decode(ModerationRequest.self, from: Data(body)),
                  let action = ModerationRequest.actions[request.action] else {
                return send(.badRequest, text: "send {\"action\": \"server_mute\", \"server_unmute\" or \"kick\", \"target\": identity}",
                            head: head, context: context)
            }
            // Whether this member may is the relay's decision (its token), answered as an event.
            switch member.moderate(action, target: request.target, reason: request.reason ?? "") {
            case .sent: send(.accepted, body: [], type: "text/plain", head: head, context: context)
            case .notConnected: send(.conflict, text: "the call is not connected yet", head: head, context: context)
            case let .refused(problem): send(.unprocessableEntity, text: problem, head: head, context: context)
            }
        case (.DELETE, 2, "whip"):
            guard let member = relay.browserMember(id: segments[1]) else { return gone(head: head, context: context) }
            member.leave()
            send(.ok, text: "left", head: head, context: context)
        default:
            send(.notFound, text: "not found; open /join with an invite", head: head, context: context)
        }
    }

    /// WHIP's POST: the token from `Authorization: Bearer`, checked before the offer is read.
    private func acceptOffer(head: HTTPRequestHead, body: [UInt8], relay: Relay, context: ChannelHandlerContext) {
        guard let authorization = head.headers.first(name: "Authorization"), authorization.lowercased().hasPrefix("bearer "),
              case let token = authorization.dropFirst("bearer ".count).trimmingCharacters(in: .whitespaces), !token.isEmpty else {
            return send(.unauthorized, text: "send the invite's token as Authorization: Bearer <token>", head: head, context: context,
                        extraHeaders: [("WWW-Authenticate", "Bearer")])
        }
        let contentType = head.headers.first(name: "Content-Type")?.lowercased() ?? ""
        guard contentType.hasPrefix("application/sdp") else {
            return send(.unsupportedMediaType, text: "send the offer as application/sdp", head: head, context: context)
        }
        // A relay bound to one address names it (the way through a reverse proxy here).
        guard let candidateHost = relay.listenHostForBrowsers
            ?? Self.candidateHost(hostHeader: head.headers.first(name: "Host") ?? "", localAddress: context.channel.localAddress?.ipAddress) else {
            return send(.serviceUnavailable, text: "the relay does not know which address browsers reach its UDP port at (the page came "
                + "through a proxy on this machine): whoever runs it should give --listen the relay's public address, not 0.0.0.0",
                head: head, context: context)
        }
        switch relay.acceptBrowserOffer(String(decoding: body, as: UTF8.self), token: token, candidateHost: candidateHost) {
        case let .failure(refusal):
            send(HTTPResponseStatus(statusCode: refusal.status), text: refusal.message, head: head, context: context)
        case let .success(member):
            send(.created, body: Array(member.answer.utf8), type: "application/sdp", head: head, context: context,
                 extraHeaders: [("Location", "/whip/\(member.id)"), ("Cache-Control", "no-store")])
        }
    }

    private func gone(head: HTTPRequestHead, context: ChannelHandlerContext) {
        send(.notFound, text: "no such call: it ended, or never started; reload the page to join again", head: head, context: context)
    }

    struct EventsAnswer: Encodable {
        let next: Int
        let events: [BrowserPageEvent]
    }

    struct StateRequest: Decodable {
        let muted: Bool
        let deafened: Bool?
    }

    struct TextRequest: Decodable {
        let text: String
    }

    struct ModerationRequest: Decodable {
        let action: String
        let target: String
        let reason: String?

        /// What a page may ask, by the words the relay's metrics and logs use for them.
        static let actions: [String: ControlMessage.ModerationAction] = Dictionary(
            uniqueKeysWithValues: [ControlMessage.ModerationAction.serverMute, .serverUnmute, .kick].map { ($0.label, $0) })
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
