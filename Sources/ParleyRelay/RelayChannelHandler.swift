import Logging
import NIOCore

/// The thin NIO edge of a ``RelayWorker``: datagrams in, flush when a read burst ends.
/// Errors are counted and logged, never allowed to close the socket.
final class RelayChannelHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    typealias OutboundOut = AddressedEnvelope<ByteBuffer>

    private let worker: RelayWorker

    init(worker: RelayWorker) {
        self.worker = worker
    }

    func handlerAdded(context: ChannelHandlerContext) {
        worker.attach(context)
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
