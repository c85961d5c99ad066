import ParleyAudio
@testable import ParleyClient
import ParleyWire
import Testing

@Suite("A remote speaker's stream")
struct RemoteSpeakerTests {
    /// RFC 3550 A.1 takes a jump of 20,000 for a restarted source and counts its packets
    /// afresh; the once-a-second delay sample must not mind (it trapped, crashing the client).
    @Test func aSequenceJumpOf20000IsFollowedAndSampledWithoutATrap() throws {
        let speaker = try RemoteSpeaker(ssrc: 7, identity: "member", configuration: JitterBuffer.Configuration(), now: 0)
        let frame: [UInt8] = [0x08] + [UInt8](repeating: 0x55, count: 40)
        var now: UInt64 = 0
        func send(_ sequence: UInt16) throws {
            now += 20_000_000
            let packet = try RTPHeader(payloadType: RTPHeader.opusPayloadType, sequenceNumber: sequence, timestamp: UInt32(sequence) &* 960, ssrc: 7)
                .serialized(payload: frame)
            try packet.withUnsafeBytes { speaker.receive(try RTPPacketView(parsing: $0), now: now, seconds: Double(now) / 1e9) }
            if now % 1_000_000_000 == 0 { speaker.sampleDelay(now: now) }
        }
        for sequence in UInt16(1_000)..<1_100 { try send(sequence) }
        for sequence in UInt16(21_100)..<21_200 { try send(sequence) }
        #expect(speaker.reception?.received ?? 0 > 50, "the restarted stream is counted")
        #expect(speaker.isReceiving(now: now))
    }
}

/// What a listener hears of one remote talker through `RemoteSpeaker` and its jitter
/// buffer: packets arrive every 20 ms at times the test gives, playback reads 10 ms at a time.
@Suite("What a listener hears of one remote talker")
struct RemoteSpeakerListeningTests {
    struct Listening {
        var heard: [Float] = []
        var firstPacketSample = 0
    }

    /// Two seconds of a 440 Hz talker, arriving every 20 ms (none of the packets in `lost`),
    /// read by playback every 10 ms; returns what playback heard.
    static func listen(to speaker: RemoteSpeaker, talker: inout ToneTalker, packets: Int = 100, lost: Set<Int> = [],
                       payloadType: UInt8 = RTPHeader.opusPayloadType) throws -> [Float] {
        var heard: [Float] = []
        var period = [Float](repeating: 0, count: 480)
        for tick in 0..<(packets * 2 + 20) {
            let now = UInt64(tick) * 10_000_000
            if tick % 2 == 0, tick / 2 < packets {
                let packet = try talker.nextPacket(payloadType: payloadType)
                if !lost.contains(tick / 2) {
                    try packet.withUnsafeBytes { speaker.receive(try RTPPacketView(parsing: $0), now: now, seconds: Double(now) / 1e9) }
                }
            }
            _ = period.withUnsafeMutableBufferPointer { speaker.buffer.read(into: $0, now: Double(now) / 1e9) }
            heard += period
        }
        return heard
    }

    @Test func aSteadyTalkerIsHeardAtTheirLevelSoonAfterTheFirstPacket() throws {
        var talker = try ToneTalker(ssrc: 7, frequency: 440)
        let speaker = try RemoteSpeaker(ssrc: 7, identity: "alice", configuration: JitterBuffer.Configuration(), now: 0)
        let heard = try Self.listen(to: speaker, talker: &talker)
        let firstSound = try #require(heard.firstIndex { abs($0) > 0.01 })
        #expect(firstSound < 48_000 / 5, "heard within 200 ms of the first packet (after \(firstSound / 48) ms)")
        let steady = heard[48_000..<96_000]
        let level = toneAmplitude(steady, frequency: 440)
        #expect(abs(level - 0.3) < 0.06, "the tone arrives at its level (0.3): \(level)")
        let dropouts = stride(from: 48_000, to: 96_000, by: 480).filter { rms(heard[$0..<$0 + 480]) < 0.05 }
        #expect(dropouts.isEmpty, "no 10 ms of the steady part is silent: \(dropouts.map { $0 / 48 }) ms")
    }

    @Test func aLostPacketIsConcealedRatherThanHeardAsAGapAndCountedAsLoss() throws {
        var talker = try ToneTalker(ssrc: 7, frequency: 440)
        let speaker = try RemoteSpeaker(ssrc: 7, identity: "alice", configuration: JitterBuffer.Configuration(), now: 0)
        let heard = try Self.listen(to: speaker, talker: &talker, lost: [60])
        let quietest = stride(from: 48_000, to: 96_000, by: 480).map { rms(heard[$0..<$0 + 480]) }.min() ?? 0
        // Concealment fades a long loss out; one lost frame is still filled with the voice.
        #expect(quietest > 0.02, "the lost 20 ms is filled, not silent (quietest 10 ms: \(quietest), the tone 0.21)")
        let figures = speaker.snapshot(now: 2_000_000_000)
        #expect(figures.packetsLost == 1)
        #expect(abs(figures.lossPercent - 1) < 0.2, "one packet in a hundred: \(figures.lossPercent) %")
        #expect(figures.concealedFrames + figures.fecRecoveredFrames >= 1)
    }

    @Test func packetsOfAnUnknownPayloadTypeAreRejectedAndNothingIsHeard() throws {
        var talker = try ToneTalker(ssrc: 7, frequency: 440)
        let speaker = try RemoteSpeaker(ssrc: 7, identity: "alice", configuration: JitterBuffer.Configuration(), now: 0)
        let heard = try Self.listen(to: speaker, talker: &talker, packets: 20, payloadType: 0)
        #expect(heard.allSatisfy { abs($0) < 0.001 }, "nothing is played")
        #expect(speaker.rejected == 20)
        #expect(speaker.reception == nil, "and nothing counted as received")
        #expect(!speaker.isReceiving(now: 500_000_000))
    }

    @Test func aTalkerUnheardForASecondIsNoLongerReceiving() throws {
        var talker = try ToneTalker(ssrc: 7, frequency: 440)
        let speaker = try RemoteSpeaker(ssrc: 7, identity: "alice", configuration: JitterBuffer.Configuration(), now: 0)
        _ = try Self.listen(to: speaker, talker: &talker, packets: 10)
        #expect(speaker.isReceiving(now: 1_000_000_000), "the last packet came at 180 ms")
        #expect(!speaker.isReceiving(now: 1_200_000_000))
    }
}
