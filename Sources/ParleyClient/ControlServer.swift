import Dispatch
import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// A call's control socket: a Unix stream socket where each line is a `CallControl` request
/// and each answer one line of JSON (`CallControlReply`). `parley ctl`, a desktop hotkey or a
/// script connects, sends, reads, and goes.
///
/// SwiftNIO, on a loop of its own: NIO already carries the call's network, and gives
/// non-blocking accepts, partial reads and many clients at once for free. Its own loop,
/// because a request acts on the call (a status reads the network loop's figures, waiting
/// for them) and nothing here may hold up the media; the actions themselves run on a serial
/// queue, never on an event loop, since they may wait.
public final class ControlServer: Sendable {
    public let path: String
    private let group: MultiThreadedEventLoopGroup
    private let channel: any Channel
    private let queue: DispatchQueue

    /// The most clients connected at once; more are turned away at once.
    static let maximumConnections = 16
    /// A client that says nothing for this long is disconnected.
    static let idleSeconds: Int64 = 30

    private init(path: String, group: MultiThreadedEventLoopGroup, channel: any Channel, queue: DispatchQueue) {
        self.path = path
        self.group = group
        self.channel = channel
        self.queue = queue
    }

    /// Listens at `path`. A socket file left by a call that ended without closing is
    /// replaced; one a running call answers on is not (`.nameTaken`).
    public static func start(path: String, perform: @escaping @Sendable (CallControl) -> CallControlReply) throws(ControlSocketError) -> ControlServer {
        if FileManager.default.fileExists(atPath: path) {
            if ControlClient.isAnswering(path: path) {
                throw .nameTaken("another call already listens at \(path); give this one a different --name")
            }
            unlink(path)
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let queue = DispatchQueue(label: "parley control")
        let connections = Atomic(0)
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 16)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    guard connections.add(1, ordering: .relaxed).newValue <= maximumConnections else {
                        connections.subtract(1, ordering: .relaxed)
                        channel.close(promise: nil)
                        return
                    }
                    channel.closeFuture.whenComplete { _ in connections.subtract(1, ordering: .relaxed) }
                    try channel.pipeline.syncOperations.addHandler(IdleStateHandler(readTimeout: .seconds(idleSeconds)))
                    try channel.pipeline.syncOperations.addHandler(ControlConnectionHandler(queue: queue, perform: perform))
                }
            }
        do {
            let channel = try bootstrap.bind(unixDomainSocketPath: path).wait()
            return ControlServer(path: path, group: group, channel: channel, queue: queue)
        } catch {
            try? group.syncShutdownGracefully()
            throw .cannotListen("cannot listen at \(path): \(error)")
        }
    }

    /// Stops listening and removes the socket file. Answers already decided are sent first:
    /// `leave` ends the call, and its client should still hear "leaving".
    public func close() {
        try? channel.close().wait()
        queue.sync {}
        try? group.next().submit {}.wait()
        try? group.syncShutdownGracefully()
        unlink(path)
    }
}

/// One client's lines: split, size-checked, parsed, acted on in order, answered.
final class ControlConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let queue: DispatchQueue
    private let perform: @Sendable (CallControl) -> CallControlReply
    private var pending = ByteBuffer()

    init(queue: DispatchQueue, perform: @escaping @Sendable (CallControl) -> CallControlReply) {
        self.queue = queue
        self.perform = perform
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        pending.writeBuffer(&bytes)
        while let newline = pending.readableBytesView.firstIndex(of: 0x0A) {
            let length = newline - pending.readerIndex
            let line = pending.readBytes(length: length) ?? []
            pending.moveReaderIndex(forwardBy: 1)
            guard length <= CallControl.maximumLineBytes else {
                refuse("a request is one line of at most \(CallControl.maximumLineBytes) bytes", context: context)
                return
            }
            guard var text = String(validating: line, as: UTF8.self) else {
                refuse("a request is UTF-8 text, like: mute", context: context)
                return
            }
            if text.hasSuffix("\r") { text.removeLast() }
            answer(text, channel: context.channel)
        }
        if pending.readableBytes > CallControl.maximumLineBytes {
            refuse("a request is one line of at most \(CallControl.maximumLineBytes) bytes", context: context)
            return
        }
        pending.discardReadBytes()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent { context.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }

    private func answer(_ text: String, channel: any Channel) {
        let control: CallControl
        do {
            control = try CallControl(parsing: text)
        } catch {
            channel.writeAndFlush(ByteBuffer(bytes: CallControlReply.refused(error.description).line()), promise: nil)
            return
        }
        let perform = self.perform
        queue.async {
            let reply = perform(control)
            channel.writeAndFlush(ByteBuffer(bytes: reply.line()), promise: nil)
        }
    }

    /// Answers with why, then hangs up: the rest of the stream cannot be trusted to be lines.
    private func refuse(_ reason: String, context: ChannelHandlerContext) {
        pending.clear()
        let channel = context.channel
        channel.writeAndFlush(ByteBuffer(bytes: CallControlReply.refused(reason).line())).whenComplete { _ in channel.close(promise: nil) }
    }
}
