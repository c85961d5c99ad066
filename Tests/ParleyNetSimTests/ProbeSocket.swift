import NIOCore
import NIOPosix
import ParleyWire

/// One probe packet as it was received: which stream (the RTP SSRC) and packet (sequence
/// number), when it was sent (carried in the payload) and when it arrived, and from where.
struct ProbeArrival: Sendable {
    let ssrc: UInt32
    let sequenceNumber: UInt16
    let sentAt: UInt64
    let arrivedAt: UInt64
    let from: SocketAddress

    var delayMilliseconds: Double { Double(Int64(arrivedAt) - Int64(sentAt)) / 1e6 }
}

/// A UDP socket on 127.0.0.1 that sends paced streams of probe packets and records every
/// probe it receives. Probes are RTP packets like a voice client's (112 bytes: Opus payload
/// type, sequence number, SSRC), whose payload starts with the send time in nanoseconds of
/// the monotonic clock, so the receiver measures each packet's one-way delay itself.
final class ProbeSocket: Sendable {
    let channel: any Channel
    var address: SocketAddress { channel.localAddress! }
    private let recorder: NIOLoopBound<Recorder>

    static let payloadSize = 100

    private init(channel: any Channel, recorder: NIOLoopBound<Recorder>) {
        self.channel = channel
        self.recorder = recorder
    }

    /// Binds a probe socket; with `keepingRawDatagrams`, it also keeps every datagram's
    /// bytes, probe or not.
    static func bind(on eventLoop: any EventLoop, keepingRawDatagrams: Bool = false) async throws -> ProbeSocket {
        let recorder = try await eventLoop.submit {
            NIOLoopBound(Recorder(keepingRawDatagrams: keepingRawDatagrams), eventLoop: eventLoop)
        }.get()
        let channel = try await DatagramBootstrap(group: eventLoop)
            .channelOption(.socketOption(.so_rcvbuf), value: 1 << 20)
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 65_536))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(recorder.value)
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return ProbeSocket(channel: channel, recorder: recorder)
    }

    /// Everything received so far.
    func arrivals() async throws -> [ProbeArrival] {
        let recorder = self.recorder
        return try await channel.eventLoop.submit { recorder.value.arrivals }.get()
    }

    /// Every datagram received, with its sender, if the socket keeps them.
    func rawDatagrams() async throws -> [(from: SocketAddress, bytes: [UInt8])] {
        let recorder = self.recorder
        return try await channel.eventLoop.submit { recorder.value.raw }.get()
    }

    /// The address a stream's packets came from, once one has arrived.
    func source(of ssrc: UInt32) async throws -> SocketAddress? {
        let recorder = self.recorder
        return try await channel.eventLoop.submit { recorder.value.sources[ssrc] }.get()
    }

    enum Destination: Sendable {
        case address(SocketAddress)
        /// Back to wherever this socket received stream `ssrc` from, as a relay replies.
        case sourceOf(ssrc: UInt32)
    }

    /// Sends `count` probes of each stream (an SSRC and where its probes go) at `rate` a
    /// second, all from this socket; a stream starts once its destination is known.
    /// Completes when the last probe has been written.
    ///
    /// The pacer wakes every 5 ms and sends what is due, with one flush per wake-up for all
    /// streams; each probe carries the time it was actually written, so batching does not
    /// affect the delays measured.
    func sendStreams(_ streams: [(ssrc: UInt32, to: Destination)], count: Int, rate: Double) async throws {
        let channel = self.channel
        let recorder = self.recorder
        let finished = channel.eventLoop.makePromise(of: Void.self)
        let state = NIOLoopBoundBox.makeBoxSendingValue(
            [PacerState](repeating: PacerState(), count: streams.count), eventLoop: channel.eventLoop)
        channel.eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: .milliseconds(5)) { task in
            let now = NIODeadline.now()
            for (index, stream) in streams.enumerated() {
                let target: SocketAddress
                switch stream.to {
                case .address(let address): target = address
                case .sourceOf(let source):
                    guard let address = recorder.value.sources[source] else { continue }
                    target = address
                }
                let start = state.value[index].start ?? now
                state.value[index].start = start
                let due = min(count, Int(Double((now - start).nanoseconds) * rate / 1e9) + 1)
                while state.value[index].sent < due {
                    let sequence = UInt16(truncatingIfNeeded: state.value[index].sent)
                    channel.write(
                        AddressedEnvelope(remoteAddress: target, data: Self.probe(ssrc: stream.ssrc, sequence: sequence)),
                        promise: nil)
                    state.value[index].sent += 1
                }
            }
            channel.flush()
            if state.value.allSatisfy({ $0.sent == count }) {
                task.cancel()
                finished.succeed()
            }
        }
        try await finished.futureResult.get()
    }

    func send(_ bytes: [UInt8], to destination: SocketAddress) async throws {
        var buffer = channel.allocator.buffer(capacity: bytes.count)
        buffer.writeBytes(bytes)
        try await channel.writeAndFlush(AddressedEnvelope(remoteAddress: destination, data: buffer)).get()
    }

    func close() async throws {
        try await channel.close().get()
    }

    private static func probe(ssrc: UInt32, sequence: UInt16) -> ByteBuffer {
        var payload = [UInt8](repeating: 0, count: payloadSize)
        let sentAt = NIODeadline.now().uptimeNanoseconds
        withUnsafeBytes(of: sentAt.bigEndian) { payload.replaceSubrange(0..<8, with: $0) }
        let header = RTPHeader(
            payloadType: RTPHeader.opusPayloadType, sequenceNumber: sequence, timestamp: UInt32(sequence) * 960, ssrc: ssrc)
        return ByteBuffer(bytes: try! header.serialized(payload: payload))
    }

    private struct PacerState {
        var start: NIODeadline?
        var sent = 0
    }

    private final class Recorder: ChannelInboundHandler {
        typealias InboundIn = AddressedEnvelope<ByteBuffer>
        var arrivals: [ProbeArrival] = []
        var sources: [UInt32: SocketAddress] = [:]
        var raw: [(from: SocketAddress, bytes: [UInt8])] = []
        let keepingRawDatagrams: Bool

        init(keepingRawDatagrams: Bool) { self.keepingRawDatagrams = keepingRawDatagrams }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let arrivedAt = NIODeadline.now().uptimeNanoseconds
            let envelope = unwrapInboundIn(data)
            if keepingRawDatagrams {
                raw.append((envelope.remoteAddress, Array(envelope.data.readableBytesView)))
            }
            let parsed: (UInt32, UInt16, UInt64)? = envelope.data.withUnsafeReadableBytes { raw in
                guard let view = try? RTPPacketView(parsing: raw), view.payload.count >= 8 else { return nil }
                return (view.ssrc, view.sequenceNumber, UInt64(bigEndian: view.payload.loadUnaligned(as: UInt64.self)))
            }
            guard let (ssrc, sequence, sentAt) = parsed else { return }
            sources[ssrc] = sources[ssrc] ?? envelope.remoteAddress
            arrivals.append(
                ProbeArrival(ssrc: ssrc, sequenceNumber: sequence, sentAt: sentAt, arrivedAt: arrivedAt, from: envelope.remoteAddress))
        }
    }
}
