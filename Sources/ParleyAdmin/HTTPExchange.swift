import NIOCore
import NIOHTTP1

/// What every connection of the relay's HTTP ports (admin, web) does around its requests: it
/// waits for a whole request for at most ``AdminConnections/requestTimeout`` (after it
/// connects, or after its last answer), and answers with a length, closing when asked to.
/// One per connection, on its event loop.
final class HTTPExchange {
    private let connections: AdminConnections
    /// Closes the connection unless a whole request arrives first.
    private var requestDeadline: Scheduled<Void>?

    init(connections: AdminConnections) {
        self.connections = connections
    }

    /// The connection waits for a whole request.
    func awaitRequest(context: ChannelHandlerContext) {
        let channel = context.channel
        connections.setWaiting(channel, true)
        requestDeadline?.cancel()
        requestDeadline = context.eventLoop.scheduleTask(in: AdminConnections.requestTimeout) { channel.close(promise: nil) }
    }

    /// A whole request arrived: it is being answered.
    func requestArrived(context: ChannelHandlerContext) {
        requestDeadline?.cancel()
        requestDeadline = nil
        connections.setWaiting(context.channel, false)
    }

    func cancel() { requestDeadline?.cancel() }

    /// Writes the answer to `head`; then the connection closes, or awaits its next request.
    func send(_ status: HTTPResponseStatus, body: [UInt8], type: String, head: HTTPRequestHead, context: ChannelHandlerContext,
              extraHeaders: [(String, String)] = []) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: type)
        headers.add(name: "Content-Length", value: "\(body.count)")
        for (name, value) in extraHeaders { headers.add(name: name, value: value) }
        let keepAlive = head.isKeepAlive && head.headers.first(name: "Connection")?.lowercased() != "close"
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        context.write(NIOAny(HTTPServerResponsePart.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
        if head.method != .HEAD, !body.isEmpty {
            context.write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        let done = context.writeAndFlush(NIOAny(HTTPServerResponsePart.end(nil)))
        if !keepAlive {
            let channel = context.channel
            done.whenComplete { _ in channel.close(promise: nil) }
        } else {
            awaitRequest(context: context)
        }
    }
}
