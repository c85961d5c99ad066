import NIOCore
import NIOHTTP1
import NIOPosix

/// One kept-alive HTTP/1.1 connection to etcd's JSON gateway, carrying requests in order.
///
/// HTTP/1.1 answers requests on a connection in the order they were sent, so requests are
/// pipelined and each answer goes to the oldest waiting promise: no lock and no
/// per-request connection. Any failure (the store went away, a timeout) closes the
/// connection and fails everything waiting on it; the next request opens a new one.
final class EtcdConnection: Sendable {
    struct Response: Sendable {
        var status: HTTPResponseStatus
        var body: [UInt8]
    }

    let channel: any Channel

    private init(channel: any Channel) { self.channel = channel }

    static func connect(host: String, port: Int, on loop: any EventLoop, timeout: TimeAmount) -> EventLoopFuture<EtcdConnection> {
        ClientBootstrap(group: loop)
            .connectTimeout(timeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(Handler())
                }
            }
            .connect(host: host, port: port)
            .map { EtcdConnection(channel: $0) }
    }

    var isActive: Bool { channel.isActive }

    /// POSTs `body` to `path`; the future fails if the connection closes or `timeout` passes first.
    func post(path: String, host: String, body: [UInt8], timeout: TimeAmount) -> EventLoopFuture<Response> {
        let promise = channel.eventLoop.makePromise(of: Response.self)
        var head = HTTPRequestHead(version: .http1_1, method: .POST, uri: path)
        head.headers.add(name: "Host", value: host)
        head.headers.add(name: "Content-Type", value: "application/json")
        head.headers.add(name: "Content-Length", value: "\(body.count)")
        let request = Handler.Request(head: head, body: body, promise: promise)
        let timer = channel.eventLoop.scheduleTask(in: timeout) { [channel] in
            // A late answer would belong to the wrong request afterwards: close the connection.
            promise.fail(EtcdError.timedOut)
            channel.close(promise: nil)
        }
        promise.futureResult.whenComplete { _ in timer.cancel() }
        channel.writeAndFlush(request).whenFailure { promise.fail($0) }
        return promise.futureResult
    }

    func close() { channel.close(promise: nil) }

    private final class Handler: ChannelDuplexHandler {
        typealias InboundIn = HTTPClientResponsePart
        typealias OutboundIn = Request
        typealias OutboundOut = HTTPClientRequestPart

        struct Request {
            var head: HTTPRequestHead
            var body: [UInt8]
            var promise: EventLoopPromise<Response>
        }

        private var waiting = CircularBuffer<EventLoopPromise<Response>>()
        private var status: HTTPResponseStatus = .ok
        private var body: [UInt8] = []

        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            let request = unwrapOutboundIn(data)
            waiting.append(request.promise)
            context.write(wrapOutboundOut(.head(request.head)), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: request.body)))), promise: nil)
            context.write(wrapOutboundOut(.end(nil)), promise: promise)
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case let .head(head):
                status = head.status
                body.removeAll(keepingCapacity: true)
            case let .body(buffer):
                body += buffer.readableBytesView
                // A gateway answer is a few kilobytes; one that grows without end is not etcd.
                if body.count > EtcdClient.maximumResponseBytes {
                    failAll(EtcdError.responseTooLarge)
                    context.close(promise: nil)
                }
            case .end:
                guard !waiting.isEmpty else { return }
                waiting.removeFirst().succeed(Response(status: status, body: body))
                body = []
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            failAll(EtcdError.connectionClosed)
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            failAll(error)
            context.close(promise: nil)
        }

        private func failAll(_ error: any Error) {
            while !waiting.isEmpty { waiting.removeFirst().fail(error) }
        }
    }
}

/// Why a request to the store did not get an answer it could use.
public enum EtcdError: Error, Sendable, Equatable, CustomStringConvertible {
    case connectionClosed
    case timedOut
    case responseTooLarge
    /// The gateway answered with an error (gRPC `code`, etcd's message).
    case refused(status: Int, code: Int?, message: String)
    /// The answer was not the JSON etcd sends.
    case unreadable(String)
    /// The lease is gone (it expired, or was revoked).
    case leaseNotFound

    public var description: String {
        switch self {
        case .connectionClosed: return "the connection to etcd closed"
        case .timedOut: return "etcd did not answer in time"
        case .responseTooLarge: return "etcd's answer was larger than any Parley asks for"
        case let .refused(status, code, message): return "etcd refused the request (HTTP \(status), code \(code.map(String.init) ?? "?")): \(message)"
        case let .unreadable(what): return "etcd's answer could not be read: \(what)"
        case .leaseNotFound: return "etcd no longer has the lease (it expired)"
        }
    }
}
