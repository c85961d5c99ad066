import NIOCore
import NIOHTTP1
import NIOPosix

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A change under a watched prefix.
public enum EtcdChange: Sendable, Equatable {
    case put(EtcdEntry)
    case delete(key: String)
}

/// A watch on every key under a prefix, from a given revision: etcd's `/v3/watch`, whose
/// HTTP answer never ends and carries one JSON message a line, each a batch of changes.
///
/// It has a connection of its own (the client's is for requests answered in turn). When the
/// connection ends or etcd cancels the watch (compaction), `onEnd` says so once; the owner
/// reads the prefix afresh and watches again from there, so no change is lost between.
public final class EtcdWatch: Sendable {
    private let channel: any Channel

    private init(channel: any Channel) { self.channel = channel }

    /// Opens the watch. `onChanges` gets each batch with the revision it brings the reader to,
    /// on the watch's event loop; `onEnd` is called once, with why.
    public static func start(
        endpoint: EtcdEndpoint, prefix: String, fromRevision revision: Int64, on loop: any EventLoop,
        onChanges: @escaping @Sendable ([EtcdChange], Int64) -> Void,
        onEnd: @escaping @Sendable (any Error) -> Void
    ) -> EventLoopFuture<EtcdWatch> {
        let request = EtcdMessages.WatchCreate(create_request: .init(
            key: EtcdClient.encode(prefix), range_end: EtcdClient.encode(EtcdClient.prefixEnd(prefix)), start_revision: "\(revision)"))
        let body: [UInt8]
        do { body = Array(try JSONEncoder().encode(request)) } catch { return loop.makeFailedFuture(error) }
        return ClientBootstrap(group: loop)
            .connectTimeout(.seconds(1))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(Handler(onChanges: onChanges, onEnd: onEnd))
                }
            }
            .connect(host: endpoint.host, port: endpoint.port)
            .flatMap { channel in
                var head = HTTPRequestHead(version: .http1_1, method: .POST, uri: "/v3/watch")
                head.headers.add(name: "Host", value: endpoint.hostHeader)
                head.headers.add(name: "Content-Type", value: "application/json")
                head.headers.add(name: "Content-Length", value: "\(body.count)")
                channel.write(HTTPClientRequestPart.head(head), promise: nil)
                channel.write(HTTPClientRequestPart.body(.byteBuffer(channel.allocator.buffer(bytes: body))), promise: nil)
                return channel.writeAndFlush(HTTPClientRequestPart.end(nil)).map { EtcdWatch(channel: channel) }
            }
    }

    public func cancel() { channel.close(promise: nil) }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTPClientResponsePart

        let onChanges: @Sendable ([EtcdChange], Int64) -> Void
        let onEnd: @Sendable (any Error) -> Void
        private var line: [UInt8] = []
        private var ended = false

        init(onChanges: @escaping @Sendable ([EtcdChange], Int64) -> Void, onEnd: @escaping @Sendable (any Error) -> Void) {
            self.onChanges = onChanges
            self.onEnd = onEnd
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case let .head(head):
                if head.status != .ok { end(EtcdError.refused(status: Int(head.status.code), code: nil, message: "the watch was refused"), context) }
            case let .body(buffer):
                for byte in buffer.readableBytesView {
                    if byte == UInt8(ascii: "\n") {
                        handle(line, context)
                        line.removeAll(keepingCapacity: true)
                    } else {
                        line.append(byte)
                    }
                }
                if line.count > EtcdClient.maximumResponseBytes { end(EtcdError.responseTooLarge, context) }
            case .end:
                if !line.isEmpty { handle(line, context) }
                end(EtcdError.connectionClosed, context)
            }
        }

        private func handle(_ bytes: [UInt8], _ context: ChannelHandlerContext) {
            guard !ended, !bytes.isEmpty else { return }
            let message: EtcdMessages.Streamed<EtcdMessages.WatchResult>
            do {
                message = try JSONDecoder().decode(EtcdMessages.Streamed<EtcdMessages.WatchResult>.self, from: Data(bytes))
            } catch {
                return end(EtcdError.unreadable("a watch message: \(error)"), context)
            }
            if let error = message.error {
                return end(EtcdError.refused(status: 200, code: error.code, message: error.message ?? "the watch failed"), context)
            }
            guard let result = message.result else { return }
            if result.canceled == true || result.compact_revision.flatMap(Int64.init).map({ $0 > 0 }) == true {
                return end(EtcdError.refused(status: 200, code: nil, message: "etcd cancelled the watch: \(result.cancel_reason ?? "compacted")"), context)
            }
            var changes: [EtcdChange] = []
            for event in result.events ?? [] {
                guard let kv = event.kv, let entry = try? EtcdEntry(kv) else { continue }
                changes.append(event.type == "DELETE" ? .delete(key: entry.key) : .put(entry))
            }
            let revision = result.header?.revision.flatMap(Int64.init) ?? 0
            if !changes.isEmpty || result.created == true { onChanges(changes, revision) }
        }

        func channelInactive(context: ChannelHandlerContext) {
            end(EtcdError.connectionClosed, context)
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            end(error, context)
        }

        private func end(_ error: any Error, _ context: ChannelHandlerContext) {
            guard !ended else { return }
            ended = true
            onEnd(error)
            context.close(promise: nil)
        }
    }
}
