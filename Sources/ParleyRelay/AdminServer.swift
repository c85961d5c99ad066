import Logging
import NIOCore
import NIOHTTP1
import NIOPosix

/// The admin HTTP port: `GET /metrics` (Prometheus text format) and `GET /healthz`.
/// Bind it to localhost or a private interface; it tells who is in which room.
final class AdminServer: Sendable {
    let channel: Channel

    /// Binds; `metrics` is called for each scrape and returns the exposition once the
    /// loops have added their latest counts; `healthy` says whether /healthz is 200.
    static func start(
        address: SocketAddress,
        group: EventLoopGroup,
        metrics: @escaping @Sendable () -> EventLoopFuture<[UInt8]>,
        healthy: @escaping @Sendable () -> Bool,
        logger: Logger
    ) throws -> AdminServer {
        let channel = try ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(AdminHTTPHandler(metrics: metrics, healthy: healthy))
                }
            }
            .childChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(to: address)
            .wait()
        return AdminServer(channel: channel)
    }

    private init(channel: Channel) {
        self.channel = channel
    }

    var localAddress: SocketAddress? { channel.localAddress }

    func close() {
        try? channel.close().wait()
    }
}

final class AdminHTTPHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let metrics: @Sendable () -> EventLoopFuture<[UInt8]>
    private let healthy: @Sendable () -> Bool
    private var request: HTTPRequestHead?

    init(metrics: @escaping @Sendable () -> EventLoopFuture<[UInt8]>, healthy: @escaping @Sendable () -> Bool) {
        self.metrics = metrics
        self.healthy = healthy
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case let .head(head):
            request = head
        case .body:
            break
        case .end:
            guard let head = request else { return }
            request = nil
            respond(to: head, context: context)
        }
    }

    private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
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

    private func send(_ status: HTTPResponseStatus, body: [UInt8], type: String, head: HTTPRequestHead, context: ChannelHandlerContext) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: type)
        headers.add(name: "Content-Length", value: "\(body.count)")
        let keepAlive = head.isKeepAlive
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
        if head.method != .HEAD {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if !keepAlive {
            let channel = context.channel
            done.whenComplete { _ in channel.close(promise: nil) }
        }
    }
}
