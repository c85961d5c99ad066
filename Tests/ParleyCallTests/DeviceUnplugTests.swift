import Foundation
import ParleyBasics
import ParleyClient
import ParleyRelayTestSupport
import Synchronization
import Testing

/// A sound device that disappears mid-call (a USB headset unplugged) does not end the call:
/// the client says so, keeps the connection, and takes the device up again when it returns.
@Suite("A sound device unplugged mid-call")
struct DeviceUnplugTests {
    /// Bob plays a 440 Hz tone into the call. Ada's headset is a real sound server's: its
    /// microphone hears what its speaker plays, so with her echo canceller off, Bob hears his
    /// tone come back through both of her devices. Once Bob has played for 3 s, the server is
    /// killed (both devices vanish under the running call), and 2 s later started again. Bob must hear the tone
    /// come back before, nothing while the headset is gone, and the tone again within 3 s of
    /// its return (Ada tries every 0.5 s; a freshly started sound server then takes about a
    /// second to carry sound from its speaker to its microphone); Ada's call must last its
    /// whole length, and she must be told each time.
    @Test func theCallOutlivesItsDevicesAndTakesThemUpAgain() async throws {
        try #require(SoundServer.isInstalled, "PulseAudio and ALSA's pulse plugin are missing: run Scripts/bootstrap (it installs pulseaudio and libasound2-plugins)")
        let room = try await CallRoom(room: "unplug")
        defer { Task { await room.close() } }
        let server = try SoundServer(directory: room.directory + "/pulse")
        try server.start()
        defer { server.kill() }
        let (tone, _) = try room.writeToneAndSilence(seconds: 30)

        let notices = Mutex<[(at: UInt64, text: String)]>([])
        var adaConfiguration = room.configuration(
            for: "ada", input: .alsa(device: "headset", configuration: server.alsaConfiguration(name: "headset", microphone: true)),
            durationSeconds: 20)
        adaConfiguration.output = .alsa(device: "headset", configuration: server.alsaConfiguration(name: "headset", microphone: false))
        adaConfiguration.echoCancellation = .off
        adaConfiguration.denoise = false
        let ada = try CallSession(adaConfiguration) { notice in notices.withLock { $0.append((MonotonicClock.now(), notice)) } }
        let bob = try CallSession(room.configuration(for: "bob", input: .wav(path: tone), durationSeconds: 21))

        let unplugged = Mutex<(gone: UInt64, back: UInt64)?>(nil)
        let results = try await CallSlots.shared.withSlot {
            async let bobResult = runOnThread { bob.run() }
            async let adaResult = runOnThread { ada.run() }
            // The unplug comes once Bob has played for 3 s (on a loaded machine the calls take
            // a while to start; a fixed sleep would unplug before there is a "before").
            let deadline = MonotonicClock.now() &+ 15_000_000_000
            while bob.statistics().playbackStartedAtNanoseconds.map({ MonotonicClock.now() &- $0 < 3_000_000_000 }) ?? true,
                  MonotonicClock.now() < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            let gone = MonotonicClock.now()
            server.kill()
            try await Task.sleep(for: .seconds(2))
            let back = MonotonicClock.now()
            try server.start()
            unplugged.withLock { $0 = (gone, back) }
            return (await adaResult, await bobResult)
        }
        if case let .failure(error) = results.0 { Issue.record("Ada's call ended: \(error)") }
        if case let .failure(error) = results.1 { Issue.record("Bob's call failed: \(error)") }
        let (gone, back) = try #require(unplugged.withLock { $0 })
        let told = notices.withLock { $0 }
        print("Ada was told:\n" + told.map { String(format: "  at %+.2f s: ", Double(Int64(bitPattern: $0.at &- gone)) / 1e9) + $0.text }.joined(separator: "\n"))
        for device in ["microphone", "speaker"] {
            let lost = told.first { $0.text.contains(device) && $0.text.contains("stopped working") }
            let returned = told.first { $0.text.contains(device) && $0.text.hasSuffix("is back") }
            let lostAt = lost.map { Double(Int64(bitPattern: $0.at &- gone)) / 1e9 }
            let returnedAt = returned.map { Double(Int64(bitPattern: $0.at &- back)) / 1e9 }
            #expect((lostAt ?? -1) >= 0, "Ada is told her \(device) stopped working after the unplug")
            #expect((returnedAt ?? -1) >= 0, "and that it is back after the return: \(String(describing: returnedAt)) s")
        }

        // What came back to Bob, per 10 ms, on his playback timeline.
        let heard = ControlledCallTests.audible(try room.received(by: "bob", from: "ada"))
        let playbackStart = try #require(bob.statistics().playbackStartedAtNanoseconds)
        func window(_ time: UInt64) -> Int { min(heard.count, max(0, Int(Int64(bitPattern: time &- playbackStart) / 10_000_000))) }
        let before = heard[window(gone - 1_500_000_000)..<window(gone)]
        let whileGone = heard[window(gone + 500_000_000)..<window(back)]
        let afterReturn = heard[window(back)...]
        let resumedAfter = afterReturn.firstIndex(of: true).map { Double($0 - window(back)) * 10 }
        print(String(format: "tone back at Bob in the 1.5 s before the unplug: %d of %d windows; while gone: %d of %d; again %@ ms after the return",
                     before.filter { $0 }.count, before.count, whileGone.filter { $0 }.count, whileGone.count,
                     resumedAfter.map { String(format: "%.0f", $0) } ?? "never"))
        print(CallStatusLine.summary(ada.statistics()))
        // The sound server's null sink takes what it plays in blocks, so the loop through it
        // is choppy: the tone comes back for part of the time, never none of it.
        #expect(before.count == 150, "Bob played for the 1.5 s before the unplug (\(before.count) windows)")
        #expect(before.filter { $0 }.count >= before.count / 3, "the tone came back through Ada's headset before the unplug")
        #expect(whileGone.allSatisfy { !$0 }, "nothing through a headset that is gone")
        #expect((resumedAfter ?? .infinity) <= 3_000, "the tone again within 3 s of the headset's return")
        if let start = afterReturn.firstIndex(of: true) {
            let rest = heard[start..<min(heard.count, start + 150)]
            #expect(rest.filter { $0 }.count >= rest.count / 3, "and it stays")
        }
    }
}
