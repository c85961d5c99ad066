import Foundation
import ParleyAudio
@testable import ParleyClient
import ParleyWire
import Testing

/// What the playback thread plays of the room, and what `--record-received` keeps of it:
/// jitter buffers fed real Opus packets at times the test gives, the mix read 10 ms at a time.
@Suite("The playback mix")
struct PlaybackMixTests {
    /// A room of talkers on one playback timeline.
    final class Room {
        let mix: PlaybackMix
        var talkers: [UInt32: (talker: ToneTalker, buffer: SharedJitterBuffer)] = [:]
        var heard: [Float] = []
        var tick = 0

        init(recordingDirectory: String? = nil) { mix = PlaybackMix(recordingDirectory: recordingDirectory) }

        func join(ssrc: UInt32, frequency: Double, amplitude: Float = 0.3, identity: String?) throws {
            let buffer = try SharedJitterBuffer(JitterBuffer.Configuration())
            talkers[ssrc] = (try ToneTalker(ssrc: ssrc, frequency: frequency, amplitude: amplitude), buffer)
            mix.add(ssrc: ssrc, identity: identity, source: buffer)
        }

        func leave(ssrc: UInt32) {
            talkers[ssrc] = nil
            mix.remove(ssrc: ssrc)
        }

        /// `seconds` of the call: each talker's packet every 20 ms, the mix every 10 ms.
        func play(seconds: Double) throws {
            var period = [Float](repeating: 0, count: 480)
            for _ in 0..<Int(seconds * 100) {
                let now = Double(tick) / 100
                if tick % 2 == 0 {
                    for ssrc in talkers.keys {
                        let packet = try talkers[ssrc]!.talker.nextPacket()
                        let view = try packet.withUnsafeBytes { try RTPPacketView(parsing: $0) }
                        talkers[ssrc]!.buffer.insert(
                            payload: packet.withUnsafeBytes { UnsafeRawBufferPointer(rebasing: $0[12...]) },
                            sequenceNumber: view.sequenceNumber, timestamp: view.timestamp, arrival: now)
                    }
                }
                period.withUnsafeMutableBufferPointer { mix.mix(into: $0, now: now) }
                heard += period
                tick += 1
            }
        }
    }

    @Test func twoTalkersAreHeardTogetherEachAtTheirOwnPitchAndLevel() throws {
        let room = Room()
        try room.join(ssrc: 1, frequency: 440, identity: "alice")
        try room.join(ssrc: 2, frequency: 700, identity: "bob")
        try room.play(seconds: 2)
        let steady = room.heard[48_000..<96_000]
        let alice = toneAmplitude(steady, frequency: 440)
        let bob = toneAmplitude(steady, frequency: 700)
        #expect(abs(alice - 0.3) < 0.06 && abs(bob - 0.3) < 0.06, "both at their level (0.3): alice \(alice), bob \(bob)")
        #expect(room.heard.allSatisfy { abs($0) <= 1 }, "the sum never clips")
        #expect(room.mix.speaking(now: 2) == ["alice", "bob"])
    }

    @Test func aTalkerWhoLeavesIsNoLongerHeardAndTheOtherCarriesOn() throws {
        let room = Room()
        try room.join(ssrc: 1, frequency: 440, identity: "alice")
        try room.join(ssrc: 2, frequency: 700, identity: "bob")
        try room.play(seconds: 1)
        room.leave(ssrc: 2)
        try room.play(seconds: 1)
        let after = room.heard[(48_000 + 4_800)..<96_000]
        #expect(toneAmplitude(after, frequency: 700) < 0.01, "bob is gone")
        #expect(abs(toneAmplitude(after, frequency: 440) - 0.3) < 0.06, "alice is heard as before")
        #expect(room.mix.speaking(now: 2) == ["alice"])
    }

    @Test func aTalkerTheRosterHasNotNamedIsShownByTheirSSRCUntilItDoes() throws {
        let room = Room()
        try room.join(ssrc: 0xB0B, frequency: 700, identity: nil)
        try room.play(seconds: 0.5)
        #expect(room.mix.speaking(now: 0.5) == ["00000b0b"])
        room.mix.name(ssrc: 0xB0B, identity: "bob")
        #expect(room.mix.speaking(now: 0.5) == ["bob"])
    }

    /// `--record-received`: one file a named talker, all as long as the playback, each talker
    /// where they were on its timeline (silence before they joined or were named).
    @Test func eachNamedTalkerIsRecordedOnThePlaybackTimeline() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-mix-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let room = Room(recordingDirectory: directory)
        // Three talkers at 0.25 never reach the soft limiter, so the files must add up to the mix.
        try room.join(ssrc: 1, frequency: 440, amplitude: 0.25, identity: "alice")
        try room.join(ssrc: 3, frequency: 1_000, amplitude: 0.25, identity: nil)
        try room.play(seconds: 1)
        try room.join(ssrc: 2, frequency: 700, amplitude: 0.25, identity: "bob")
        room.mix.name(ssrc: 3, identity: "carol")
        try room.play(seconds: 1.5)
        #expect(room.mix.finishRecordings().isEmpty)

        let alice = try WAVAudio(contentsOf: directory + "/alice.wav").samples
        let bob = try WAVAudio(contentsOf: directory + "/bob.wav").samples
        let carol = try WAVAudio(contentsOf: directory + "/carol.wav").samples
        #expect(alice.count == room.heard.count && bob.count == room.heard.count && carol.count == room.heard.count,
                "every file lasts the whole playback (\(room.heard.count) samples): \(alice.count), \(bob.count), \(carol.count)")
        #expect(bob[..<48_000].allSatisfy { $0 == 0 } && carol[..<48_000].allSatisfy { $0 == 0 }, "silent before they were there or named")
        #expect(abs(toneAmplitude(alice[48_000..<96_000], frequency: 440) - 0.25) < 0.05)
        #expect(abs(toneAmplitude(bob[84_000..<120_000], frequency: 700) - 0.25) < 0.05)
        #expect(abs(toneAmplitude(carol[60_000..<120_000], frequency: 1_000) - 0.25) < 0.05)
        #expect(toneAmplitude(alice[48_000..<96_000], frequency: 700) < 0.01, "a file holds its own talker only")
        let played = room.heard[96_000..<110_000]
        let summed = (96_000..<110_000).map { alice[$0] + bob[$0] + carol[$0] }
        let difference = zip(played, summed).map { abs($0 - $1) }.max() ?? 1
        #expect(difference < 0.002, "the files sum to the mix heard (largest difference \(difference))")
    }
}
