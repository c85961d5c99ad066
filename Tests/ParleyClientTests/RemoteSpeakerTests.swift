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
