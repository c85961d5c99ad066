import NIOCore
import NIOHTTP1
import NIOPosix
import ParleyRelay

/// One request to a relay's admin API and its answer, for `parley-relay admin` and tests:
/// SwiftNIO's HTTP/1.1 client pipeline on a loop of its own, one connection per request.
public enum AdminClient {
    public struct Answer: Sendable {
        public var status: Int
        public var body: [UInt8]
    }

    public enum Failure: Error, CustomStringConvertible {
        /// Nothing listens at the address, or it did not answer in time.
        case unreachable(HostAndPort, String)

        public var description: String {
            switch self {
            case let .unreachable(address, reason):
                return "no relay admin port answers at \(address) (\(reason)); is the relay running, with --admin \(address)?"
            }
        }
    }

    public static func send(method: String, path: String, body: [UInt8] = [], token: String?, to address: HostAndPort,
                            timeoutSeconds: Int64 = 5) throws(Failure) -> Answer {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }
        let loop = group.next()
        let promise = loop.makePromise(of: Answer.self)
        do {
            let channel = try ClientBootstrap(group: group)
                .connectTimeout(.seconds(timeoutSeconds))
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        try channel.pipeline.syncOperations.addHandler(Collector(promise: promise))
                    }
                }
                .connect(to: address.socketAddress())
                .wait()
            var headers = HTTPHeaders()
            headers.add(name: "Host", value: address.description)
            headers.add(name: "Connection", value: "close")
            headers.add(name: "Content-Length", value: "\(body.count)")
            if !body.isEmpty { headers.add(name: "Content-Type", value: "application/json") }
            if let token { headers.add(name: "Authorization", value: "Bearer \(token)") }
            let head = HTTPRequestHead(version: .http1_1, method: HTTPMethod(rawValue: method), uri: path, headers: headers)
            channel.write(HTTPClientRequestPart.head(head), promise: nil)
            if !body.isEmpty { channel.write(HTTPClientRequestPart.body(.byteBuffer(channel.allocator.buffer(bytes: body))), promise: nil) }
            channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
            // A relay that accepts but never answers: closing the channel ends the wait.
            let timeout = loop.scheduleTask(in: .seconds(timeoutSeconds)) { channel.close(promise: nil) }
            defer {
                timeout.cancel()
                channel.close(promise: nil)
            }
            return try promise.futureResult.wait()
        } catch {
            // A connection that never opened leaves the promise to us.
            promise.fail(error)
            throw .unreachable(address, "\(error)")
        }
    }

    /// Gathers the response's status and body.
    private final class Collector: ChannelInboundHandler {
        typealias InboundIn = HTTPClientResponsePart
        let promise: EventLoopPromise<Answer>
        var status = 0
        var body: [UInt8] = []
        var finished = false

        init(promise: EventLoopPromise<Answer>) { self.promise = promise }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case let .head(head): status = Int(head.status.code)
            case var .body(part): body += part.readBytes(length: part.readableBytes) ?? []
            case .end: finish(.success(Answer(status: status, body: body)))
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            finish(.failure(ChannelError.eof))
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            finish(.failure(error))
            context.close(promise: nil)
        }

        private func finish(_ result: Result<Answer, any Error>) {
            guard !finished else { return }
            finished = true
            promise.completeWith(result)
        }
    }
}
