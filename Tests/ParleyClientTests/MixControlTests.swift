import Foundation
import ParleyAudio
@testable import ParleyClient
import Testing

/// What a listener hears when they turn one person down, silence them, or deafen: the mix of
/// real Opus streams, measured per talker by their pitch.
@Suite("Volumes and deafening in the playback mix")
struct MixControlTests {
    typealias Room = PlaybackMixTests.Room

    static func levels(_ room: Room, from start: Int) -> (alice: Double, bob: Double) {
        let heard = room.heard[start..<room.heard.count]
        return (toneAmplitude(heard, frequency: 440), toneAmplitude(heard, frequency: 700))
    }

    @Test func halfVolumeLowersThatSpeakerBySixDecibelsAndLeavesTheOther() throws {
        let room = Room()
        try room.join(ssrc: 1, frequency: 440, amplitude: 0.2, identity: "alice")
        try room.join(ssrc: 2, frequency: 700, amplitude: 0.2, identity: "bob")
        try room.play(seconds: 1.5)
        let before = Self.levels(room, from: 48_000)
        room.mix.setVolume(identity: "bob", percent: 50)
        let changedAt = room.heard.count
        try room.play(seconds: 1)
        let after = Self.levels(room, from: changedAt + 4_800)
        let bobChange = 20 * log10(after.bob / before.bob)
        let aliceChange = 20 * log10(after.alice / before.alice)
        print("volume 50%: bob \(String(format: "%.2f", bobChange)) dB, alice \(String(format: "%.2f", aliceChange)) dB")
        #expect(abs(bobChange - -6.02) < 0.5, "bob lowered by 6 dB: \(bobChange) dB")
        #expect(abs(aliceChange) < 0.5, "alice as before: \(aliceChange) dB")
        #expect(room.mix.volume(of: "bob") == 50)
    }

    @Test func doubleVolumeRaisesBySixDecibels() throws {
        let room = Room()
        try room.join(ssrc: 2, frequency: 700, amplitude: 0.1, identity: "bob")
        room.mix.setVolume(identity: "bob", percent: 200)
        try room.play(seconds: 1.5)
        let raised = toneAmplitude(room.heard[48_000...], frequency: 700)
        let change = 20 * log10(raised / 0.1)
        #expect(abs(change - 6.02) < 0.7, "\(change) dB")
    }

    @Test func volumeZeroSilencesOnePersonHereAndTheOthersAreStillHeard() throws {
        let room = Room()
        try room.join(ssrc: 1, frequency: 440, identity: "alice")
        try room.join(ssrc: 2, frequency: 700, identity: "bob")
        room.mix.setVolume(identity: "bob", percent: 0)
        try room.play(seconds: 1.5)
        let heard = Self.levels(room, from: 48_000)
        #expect(heard.bob < 0.001 && abs(heard.alice - 0.3) < 0.06, "\(heard)")
        #expect(room.mix.speaking(now: 1.5).contains("bob"), "bob still shows as speaking: the meter is before the volume")
    }

    @Test func aVolumeSetBeforeSomeoneSpeaksHoldsWhenTheyArriveAndAfterTheyRejoin() throws {
        let room = Room()
        room.mix.setVolume(identity: "bob", percent: 50)
        try room.join(ssrc: 2, frequency: 700, amplitude: 0.2, identity: nil)
        room.mix.name(ssrc: 2, identity: "bob")
        try room.play(seconds: 1.5)
        #expect(abs(toneAmplitude(room.heard[48_000...], frequency: 700) - 0.1) < 0.02)
        room.leave(ssrc: 2)
        try room.join(ssrc: 3, frequency: 700, amplitude: 0.2, identity: "bob")
        let rejoinedAt = room.heard.count
        try room.play(seconds: 1.5)
        #expect(abs(toneAmplitude(room.heard[(rejoinedAt + 48_000)...], frequency: 700) - 0.1) < 0.02, "a new stream of bob's is at 50% too")
    }

    @Test func deafenedTheMixIsSilentAndUndeafenedTheRoomIsBackAtOnce() throws {
        let room = Room()
        try room.join(ssrc: 1, frequency: 440, identity: "alice")
        try room.play(seconds: 1)
        room.mix.setDeafened(true)
        let deafenedAt = room.heard.count
        try room.play(seconds: 1)
        #expect(room.heard[deafenedAt...].allSatisfy { $0 == 0 }, "nothing at all is played")
        room.mix.setDeafened(false)
        let back = room.heard.count
        try room.play(seconds: 0.5)
        #expect(abs(toneAmplitude(room.heard[(back + 480)...], frequency: 440) - 0.3) < 0.06, "alice is heard from the next period")
    }
}
