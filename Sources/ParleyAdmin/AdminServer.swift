import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ParleyBasics
import ParleyRelay
import Synchronization

/// The admin HTTP port: `GET /metrics` (Prometheus text format), `GET /healthz`, and the
/// admin API under `/admin/` (``AdminAPI``: rooms, kick, mute, close; bearer token).
/// Bind it to localhost or a private interface; it tells who is in which room.
/// `AdminServer.start(serving:at:token:logger:)` (`AdminServer+Relay.swift`) serves a relay.
public final class AdminServer: Sendable {
    let channel: Channel
    /// The event loop the server made for itself, shut down with it.
    private let ownGroup: MultiThreadedEventLoopGroup?

    /// Binds; `metrics` is called for each scrape and returns the exposition once the
    /// loops have added their latest counts; `healthy` says whether /healthz is 200; `admin`
    /// answers the admin API's authorised requests (`token` nil: the API is off).
    static func start(
        address: SocketAddress,
        group: EventLoopGroup,
        metrics: @escaping @Sendable () -> EventLoopFuture<[UInt8]>,
        healthy: @escaping @Sendable () -> Bool,
        token: AdminToken? = nil,
        admin: @escaping @Sendable (AdminAPI.Route, any EventLoop) -> EventLoopFuture<AdminAPI.Response> = { _, loop in
            loop.makeSucceededFuture(.error(404, "the admin API is off"))
        },
        logger: Logger
    ) throws -> AdminServer {
        let connections = AdminConnections()
        let channel = try ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                connections.opened(channel)
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(AdminHTTPHandler(
                        metrics: metrics, healthy: healthy, token: token, admin: admin, connections: connections))
                }
            }
            .childChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(to: address)
            .wait()
        return AdminServer(channel: channel)
    }

    init(channel: Channel, ownGroup: MultiThreadedEventLoopGroup? = nil) {
        self.channel = channel
        self.ownGroup = ownGroup
    }

    public var localAddress: SocketAddress? { channel.localAddress }

    /// Stops listening and closes the connections; the server's own event loop stops too.
    public func close() {
        try? channel.close().wait()
        try? ownGroup?.syncShutdownGracefully()
    }
}

/// The admin port's connections: at most ``limit`` at once, and none kept for longer than
/// ``requestTimeout`` without a whole request (after it connects, or after its last answer).
/// A scraper or `curl` sends its request at once; a connection that sends nothing, or a byte
/// at a time, only holds a descriptor, and 1,200 of them held for a minute cost the relay
/// 1,200. At the limit, a new connection closes the oldest one still waiting for its request,
/// so a flood of idle connections cannot lock a scrape out.
final class AdminConnections: Sendable {
    static let limit = 64
    static let requestTimeout = TimeAmount.seconds(5)

    private struct Entry {
        let channel: any Channel
        let opened: UInt64
        /// Whether it is waiting for a whole request (rather than being answered).
        var waiting = true
    }

    private let entries = Mutex<[ObjectIdentifier: Entry]>([:])

    func opened(_ channel: any Channel) {
        let key = ObjectIdentifier(channel)
        let evicted = entries.withLock { entries -> (any Channel)? in
            guard entries.count >= Self.limit else {
                entries[key] = Entry(channel: channel, opened: MonotonicClock.now())
                return nil
            }
            // The oldest still waiting makes way (out of the count at once: its close completes
            // later, on its own loop); with none waiting, every slot is answering, and the
            // newcomer is turned away.
            guard let oldest = entries.filter(\.value.waiting).min(by: { $0.value.opened < $1.value.opened }) else { return channel }
            entries[oldest.key] = nil
            entries[key] = Entry(channel: channel, opened: MonotonicClock.now())
            return oldest.value.channel
        }
        evicted?.close(promise: nil)
        channel.closeFuture.whenComplete { [self] _ in entries.withLock { _ = $0.removeValue(forKey: key) } }
    }

    /// The connection became a WebSocket (the web port's signalling): no longer one of these.
    func upgraded(_ channel: any Channel) {
        entries.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(channel)) }
    }

    func setWaiting(_ channel: any Channel, _ waiting: Bool) {
        entries.withLock { $0[ObjectIdentifier(channel)]?.waiting = waiting }
    }
}

final class AdminHTTPHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let metrics: @Sendable () -> EventLoopFuture<[UInt8]>
    private let healthy: @Sendable () -> Bool
    private let token: AdminToken?
    private let admin: @Sendable (AdminAPI.Route, any EventLoop) -> EventLoopFuture<AdminAPI.Response>
    private var request: HTTPRequestHead?
    /// The admin API request's body so far; nil once it grew past ``AdminAPI/maximumBodyBytes``
    /// (the request has been answered 413 and the connection is closing).
    private var body: [UInt8]? = []
    private let exchange: HTTPExchange

    init(metrics: @escaping @Sendable () -> EventLoopFuture<[UInt8]>, healthy: @escaping @Sendable () -> Bool, token: AdminToken?,
         admin: @escaping @Sendable (AdminAPI.Route, any EventLoop) -> EventLoopFuture<AdminAPI.Response>, connections: AdminConnections) {
        self.metrics = metrics
        self.healthy = healthy
        self.token = token
        self.admin = admin
        exchange = HTTPExchange(connections: connections)
    }

    func handlerAdded(context: ChannelHandlerContext) { exchange.awaitRequest(context: context) }

    func handlerRemoved(context: ChannelHandlerContext) { exchange.cancel() }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if case .end = part { exchange.requestArrived(context: context) }
        switch part {
        case let .head(head):
            request = head
            body = []
            if let length = head.headers.first(name: "Content-Length").flatMap(Int.init), length > AdminAPI.maximumBodyBytes {
                refuseLargeBody(head: head, context: context)
            }
        case var .body(part):
            guard let head = request, body != nil else { return }
            if body!.count + part.readableBytes > AdminAPI.maximumBodyBytes {
                refuseLargeBody(head: head, context: context)
            } else {
                body!.append(contentsOf: part.readBytes(length: part.readableBytes) ?? [])
            }
        case .end:
            guard let head = request, let received = body else { return }
            request = nil
            body = []
            respond(to: head, body: received, context: context)
        }
    }

    /// A body over the limit is answered at once and the connection closed, so nothing more of it is read.
    private func refuseLargeBody(head: HTTPRequestHead, context: ChannelHandlerContext) {
        body = nil
        var closing = head
        closing.headers.replaceOrAdd(name: "Connection", value: "close")
        send(.payloadTooLarge, body: AdminAPI.Response.error(413, "the body is larger than \(AdminAPI.maximumBodyBytes) bytes").body,
             type: "application/json", head: closing, context: context)
    }

    private func respond(to head: HTTPRequestHead, body: [UInt8], context: ChannelHandlerContext) {
        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
        if path.hasPrefix(AdminAPI.pathPrefix) {
            return respondToAdmin(head: head, path: path, body: body, context: context)
        }
        guard head.method == .GET || head.method == .HEAD else {
            return send(.methodNotAllowed, body: Array("only GET and HEAD are served here\n".utf8), type: "text/plain", head: head, context: context)
        }
        switch path {
        case "/metrics":
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            metrics().hop(to: context.eventLoop).whenComplete { result in
                let (handler, context) = bound.value
                switch result {
                case let .success(body):
                    handler.send(.ok, body: body, type: "text/plain; version=0.0.4; charset=utf-8", head: head, context: context)
                case let .failure(error):
                    handler.send(.internalServerError, body: Array("metrics unavailable: \(error)\n".utf8), type: "text/plain", head: head, context: context)
                }
            }
        case "/healthz":
            if healthy() {
                send(.ok, body: Array("ok\n".utf8), type: "text/plain", head: head, context: context)
            } else {
                send(.serviceUnavailable, body: Array("shutting down\n".utf8), type: "text/plain", head: head, context: context)
            }
        default:
            send(.notFound, body: Array("not found; try /metrics or /healthz\n".utf8), type: "text/plain", head: head, context: context)
        }
    }

    private func respondToAdmin(head: HTTPRequestHead, path: String, body: [UInt8], context: ChannelHandlerContext) {
        let authorization = head.headers.first(name: "Authorization")
        switch AdminAPI.route(method: head.method.rawValue, path: path, authorization: authorization, body: body, token: token) {
        case let .failure(refusal):
            sendAdmin(refusal.response, head: head, context: context)
        case let .success(route):
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            admin(route, context.eventLoop).hop(to: context.eventLoop).whenComplete { result in
                let (handler, context) = bound.value
                switch result {
                case let .success(response): handler.sendAdmin(response, head: head, context: context)
                case let .failure(error): handler.sendAdmin(.error(500, "the relay could not answer: \(error)"), head: head, context: context)
                }
            }
        }
    }

    private func sendAdmin(_ response: AdminAPI.Response, head: HTTPRequestHead, context: ChannelHandlerContext) {
        send(HTTPResponseStatus(statusCode: response.status), body: response.body, type: "application/json", head: head, context: context)
    }

    private func send(_ status: HTTPResponseStatus, body: [UInt8], type: String, head: HTTPRequestHead, context: ChannelHandlerContext) {
        exchange.send(status, body: body, type: type, head: head, context: context)
    }
}
