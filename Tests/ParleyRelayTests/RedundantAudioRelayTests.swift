import Foundation
import ParleyAudio
import ParleyClient
@testable import ParleyRelay
import ParleyRelayTestSupport
import ParleyWire
import Testing

/// RFC 2198 redundancy through the relay: the relay forwards a RED packet as it forwards
/// Opus, without looking at it, and tells every member who can read one.
extension RelayOverUDP {
    @Suite("Redundant audio through the relay")
    struct RedundantAudioRelayTests {
        /// A talker's RED packet, as its VoiceEncoder builds it: a frame of speech-like sound
        /// with copies of the two before it.
        static func redPacket() throws -> [UInt8] {
            var configuration = OpusEncoder.Configuration()
            configuration.dtx = true
            let encoder = try VoiceEncoder(
                encoder: OpusEncoder(configuration),
                setting: .init(bitrate: 32_000, expectedLossPercent: 10, redundancy: .init(distances: [1, 2])))
            var packetizer = RTPPacketizer(ssrc: 0xFEED, initialSequenceNumber: 65_535, initialTimestamp: 1_000)
            var payload = [UInt8](repeating: 0, count: VoiceEncoder.maximumPayloadSize)
            var packet = [UInt8](repeating: 0, count: RTPPacketizer.maximumPacketSize)
            var last: [UInt8] = []
            for frame in 0..<3 {
                let samples = (0..<960).map { Float(0.3 * sin(Double(frame * 960 + $0) * 2 * .pi * 220 / 48_000)) }
                let output = try samples.withUnsafeBufferPointer { input in try payload.withUnsafeMutableBytes { try encoder.encode(input, into: $0) } }
                guard case let .payload(payloadType, count) = output else { throw TestFailure("a tone was taken for silence") }
                let size = try payload.withUnsafeBytes { bytes in
                    try packet.withUnsafeMutableBytes {
                        try packetizer.packetize(
                            payload: UnsafeRawBufferPointer(rebasing: bytes[0..<count]), payloadType: payloadType, samples: 960,
                            level: AudioLevel(voiceActivity: true, level: 20), into: $0)
                    }
                }
                last = Array(packet.prefix(size))
            }
            return last
        }

        @Test func aRedPacketCrossesTheRelayByteForByte() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let talker = try fixture.member("talker", room: "red", capabilities: .redundantAudio)
            let listener = try fixture.member("listener", room: "red", capabilities: .redundantAudio)
            #expect(talker.waitForRoster(["talker", "listener"]))
            var packet = try Self.redPacket()
            // The relay forwards the talker's SSRC only.
            packet.withUnsafeMutableBytes { $0.storeBytes(of: talker.ssrc.bigEndian, toByteOffset: 8, as: UInt32.self) }
            talker.send(packet)
            #expect(listener.pump(timeout: 5) { !$0.mediaInbox.isEmpty })
            #expect(listener.mediaInbox == [packet], "the relay changed or lost the RED packet")

            // And what arrived unwraps into the frame and its two predecessors, numbered as sent.
            var frames: [(UInt16, Bool)] = []
            try RTPPacketView.withParsed(listener.mediaInbox[0]) { view in
                #expect(view.payloadType == RTPHeader.redPayloadType)
                IncomingFrames.forEach(in: view) { frames.append(($0.sequenceNumber, $0.isRedundant)) }
            }
            #expect(frames.map(\.0) == [1, 65_535, 0] && frames.map(\.1) == [false, true, true])
        }

        /// Mixed versions: a member whose join offered nothing (an older client) is listed
        /// without the capability, so senders keep to plain Opus while it is in the room.
        @Test func theRosterSaysWhichMembersReadRedundantAudio() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let current = try fixture.member("current", room: "mixed", capabilities: .redundantAudio)
            _ = try fixture.member("older", room: "mixed")
            #expect(current.waitForRoster(["current", "older"]))
            let roster = try #require(current.latestRoster)
            let capabilities = Dictionary(uniqueKeysWithValues: roster.map { ($0.identity, $0.capabilities) })
            #expect(capabilities == ["current": .redundantAudio, "older": []])
        }
    }
}
