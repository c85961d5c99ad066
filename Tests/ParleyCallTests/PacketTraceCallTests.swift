import Foundation
import NIOCore
import NIOPosix
import ParleyAudio
import ParleyClient
import ParleyNetSim
import ParleyWire
import Synchronization
import Testing

/// The diagnostics the call-quality benchmark is built on (`--packet-trace`,
/// `--copy-received-rtp`), in a real call through the relay and a lossy proxy: what they
/// record must be what happened, or every figure measured from them is wrong.
@Suite("Packet traces of a real call")
struct PacketTraceCallTests {
    @Test func tracesAndCopiesRecordExactlyWhatWasSentAndReceived() async throws {
        let conversation = try Conversation.standard.get()
        let scenario = try #require(Scenario.all.first { $0.name == "loss-5" })
        let room = try await CallRoom(room: "traced", scenario: scenario)
        defer { Task { await room.close() } }
        let copies = try await CopyReceiver.start()
        defer { copies.close() }
        let directory = room.directory
        let copyAddress = copies.address

        let outcome = try await CallSlots.shared.withSlot {
            try await room.run(conversation) { talker, configuration in
                configuration.packetTracePath = directory + "/\(talker).csv"
                configuration.recordSentPath = directory + "/\(talker)-sent.wav"
                if talker == "bob" { configuration.receivedRTPCopies = [copyAddress] }
            }
        }
        for (talker, result) in outcome.results {
            if case let .failure(error) = result { Issue.record("\(talker)'s call failed: \(error)") }
        }
        let bob = try PacketTrace.read(contentsOf: directory + "/bob.csv")
        let ada = try PacketTrace.read(contentsOf: directory + "/ada.csv")

        // The copies are the packets bob's trace says it received, in the same order, with
        // the same payloads: a second receiver fed them hears what bob's jitter buffer got.
        let received = bob.filter { $0.direction == .received }
        #expect(received.count > 500)
        let copied = copies.packets()
        #expect(copied.map(\.sequenceNumber) == received.map(\.sequenceNumber))
        #expect(copied.map(\.payload) == received.map(\.payload))

        // Every packet ada sent is placed in her --record-sent recording where its RTP
        // timestamp says: the timestamp runs 960 a frame, sent or not.
        let sent = ada.filter { $0.direction == .sent }
        let offsets = Set(sent.compactMap { entry in entry.frameStartSample.map { entry.timestamp &- UInt32(truncatingIfNeeded: $0) } })
        #expect(offsets.count == 1, "\(offsets.count) different timestamp offsets")
        // ... and the frames she did not send (DTX) are her silences.
        let recording = try WAVAudio(contentsOf: directory + "/ada-sent.wav").mono
        let sentFrames = Set(sent.compactMap { $0.frameStartSample.map { $0 / 960 } })
        func energy(_ frames: [Int]) -> Double {
            frames.map { frame in recording[frame * 960..<(frame + 1) * 960].reduce(0.0) { $0 + Double($1 * $1) } }
                .reduce(0, +) / Double(max(1, frames.count))
        }
        let allFrames = Array(0..<recording.count / 960)
        let spoken = energy(allFrames.filter { sentFrames.contains($0) })
        let silent = energy(allFrames.filter { !sentFrames.contains($0) })
        #expect(silent < spoken / 100, "energy per frame: sent \(spoken), not sent \(silent)")

        // The fates read from the two traces are the loss bob's receiver reports counted,
        // over the same span: from the first to the last of ada's packets bob got.
        let fromAda = received.filter { $0.ssrc == sent.first?.ssrc }
        let first = try #require(fromAda.first?.timestamp)
        let span = try #require(fromAda.last?.timestamp) &- first
        let spanned = sent.filter { $0.timestamp &- first <= span }
        let fates = PacketFates(senderTrace: spanned, receiverTrace: bob, frameSamples: 960, frames: recording.count / 960 + 1)
        let measured = 100 * Double(fates.lostFrames) / Double(fates.sentFrames)
        let reported = try #require(outcome.statistics["bob"]?.speakers.first { $0.identity == "ada" }?.lossPercent)
        print("ada → bob: \(fates.lostFrames) of \(fates.sentFrames) frames lost (\(String(format: "%.1f", measured)) %), RTCP says \(String(format: "%.1f", reported)) %")
        #expect(fates.lostFrames > 0)
        #expect(abs(measured - reported) < 1)
    }
}

/// A UDP socket on 127.0.0.1 that keeps every RTP packet sent to it.
final class CopyReceiver: Sendable {
    struct Packet: Sendable {
        var sequenceNumber: UInt16
        var payload: [UInt8]
    }

    let address: SocketAddress
    private let group: MultiThreadedEventLoopGroup
    private let channel: any Channel
    private let sink: Sink

    private init(group: MultiThreadedEventLoopGroup, channel: any Channel, sink: Sink) throws {
        self.group = group
        self.channel = channel
        self.sink = sink
        address = try #require(channel.localAddress)
    }

    static func start() async throws -> CopyReceiver {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let sink = Sink()
        let channel = try await DatagramBootstrap(group: group)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(sink) }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return try CopyReceiver(group: group, channel: channel, sink: sink)
    }

    func packets() -> [Packet] { sink.packets.withLock { $0 } }

    func close() {
        try? channel.close().wait()
        try? group.syncShutdownGracefully()
    }

    private final class Sink: ChannelInboundHandler, Sendable {
        typealias InboundIn = AddressedEnvelope<ByteBuffer>
        let packets = Mutex<[Packet]>([])

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let bytes = Array(Self.unwrapInboundIn(data).data.readableBytesView)
            bytes.withUnsafeBytes { raw in
                guard let view = try? RTPPacketView(parsing: raw) else { return }
                let packet = Packet(sequenceNumber: view.sequenceNumber, payload: Array(raw[view.payloadRange]))
                packets.withLock { $0.append(packet) }
            }
        }
    }
}
