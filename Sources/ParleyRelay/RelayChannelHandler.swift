import Logging
import NIOCore

/// The thin NIO edge of a ``RelayWorker``: datagrams in, flush when a read burst ends.
/// (The worker writes to the socket itself, with `sendmmsg` on `descriptor`.)
/// Errors are counted and logged, never allowed to close the socket.
final class RelayChannelHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>

    private let worker: RelayWorker
    /// The socket under the channel, which the relay opened and handed to SwiftNIO.
    private let descriptor: CInt

    init(worker: RelayWorker, descriptor: CInt) {
        self.worker = worker
        self.descriptor = descriptor
    }

    func handlerAdded(context: ChannelHandlerContext) {
        worker.attach(context, descriptor: descriptor)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        worker.detach()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        worker.receive(envelope.data, from: envelope.remoteAddress, nowNanoseconds: monotonicNanoseconds())
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        worker.flush()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // UDP reports things like ECONNREFUSED from an earlier send here; the socket is fine.
        worker.logger.debug("socket error (the relay carries on)", metadata: ["error": "\(error)"])
    }
}
