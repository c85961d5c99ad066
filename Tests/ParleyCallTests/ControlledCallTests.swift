import Foundation
import ParleyAudio
import ParleyBasics
import ParleyClient
import ParleyRelayTestSupport
import Testing

/// A person at a real `parley call` (the binary, talking a steady tone into the call)
/// mutes, unmutes and uses push-to-talk through `parley ctl` (the binary, over the call's
/// real control socket), while another member listens. What is asserted is what the
/// listener recorded, on one clock: CLOCK_MONOTONIC, which both processes read.
@Suite("Driving a running call through parley ctl")
struct ControlledCallTests {
    static var parley: URL {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("parley")
    }

    /// Runs `parley ctl ARGS`; returns its output and when it started and returned.
    static func ctl(_ arguments: [String], runtime: String) throws -> (output: String, status: Int32, started: UInt64, returned: UInt64) {
        let process = Process()
        process.executableURL = parley
        process.arguments = ["ctl"] + arguments
        process.environment = ["XDG_RUNTIME_DIR": runtime, "PATH": "/usr/bin:/bin"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        let started = MonotonicClock.now()
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (String(decoding: data, as: UTF8.self), process.terminationStatus, started, MonotonicClock.now())
    }

    /// Per 10 ms of the listener's recording: whether the talker was audible (RMS above
    /// −40 dBFS; the tone is at −13.5).
    static func audible(_ samples: [Float]) -> [Bool] {
        stride(from: 0, to: samples.count - 479, by: 480).map { start in
            var sum: Float = 0
            for sample in samples[start..<start + 480] { sum += sample * sample }
            return (sum / 480).squareRoot() > 0.01
        }
    }

    @Test func muteStopsWhatTheOthersHearWithinATenthOfASecondAndPushToTalkSendsOnlyWhileHeld() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.parley.path), "build it first: swift build --build-tests")
        let room = try await CallRoom(room: "controls")
        defer { Task { await room.close() } }
        let runtime = room.directory + "/runtime"
        try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true)
        // The steps below take about 8 s when `parley ctl` starts at once; on a loaded machine
        // each run of the (debug) binary can take a second or more. So the tone and both calls
        // last far longer than the steps, and alice is asked to leave once they are done: a
        // slow machine makes the test slower, not a call that ended before its last step.
        let (tone, silence) = try room.writeToneAndSilence(seconds: 60)

        try await CallSlots.shared.withSlot {
            // The listener, in this process.
            let bob = try CallSession(room.configuration(for: "bob", input: .wav(path: silence), durationSeconds: 90))
            async let bobResult = runOnThread { bob.run() }

            // The talker: the real program, its control socket under our runtime folder.
            let alice = Process()
            alice.executableURL = Self.parley
            alice.arguments = [
                "call", "--relay", "127.0.0.1:\(room.clientPort)", "--room", room.room, "--token", room.token("alice"),
                "--relay-key=" + room.relayKey.publicKeyText, "--name", "alice", "--input", tone, "--output", room.directory + "/alice-heard.wav",
                "--aec", "off", "--duration", "80", "--quiet",
            ]
            alice.environment = ["XDG_RUNTIME_DIR": runtime, "PATH": "/usr/bin:/bin"]
            alice.standardOutput = FileHandle.nullDevice
            try alice.run()
            defer { if alice.isRunning { alice.terminate() } }

            // Talking for two seconds, muted for two, unmuted for one, then push-to-talk: held
            // for one second between two silent ones.
            var answered = false
            for _ in 0..<50 where !answered {
                try await Task.sleep(for: .milliseconds(100))
                answered = (try? Self.ctl(["status"], runtime: runtime))?.status == 0
            }
            try #require(answered, "alice's call never answered on its control socket")
            try await Task.sleep(for: .seconds(2))
            let mute = try Self.ctl(["mute"], runtime: runtime)
            #expect(mute.status == 0 && mute.output.contains("muted"), "\(mute.output)")
            try await Task.sleep(for: .seconds(2))
            let status = try Self.ctl(["--call", "alice", "status"], runtime: runtime)
            #expect(status.output.contains("\"muted\" : true"), "the status says so: \(status.output.prefix(300))")
            // The relay told the room: alice's own status and bob's both name her muted.
            let told = try JSONDecoder().decode(CallStatistics.self, from: Data(status.output.utf8))
            #expect(told.mutedMembers == ["alice"] && bob.statistics().mutedMembers == ["alice"], "\(String(describing: told.mutedMembers))")
            let say = try Self.ctl(["say", "back", "in", "five"], runtime: runtime)
            #expect(say.status == 0 && say.output.contains("sent to the room"), "\(say.output)")
            let unmute = try Self.ctl(["unmute"], runtime: runtime)
            try await Task.sleep(for: .seconds(1))
            let mode = try Self.ctl(["ptt", "on"], runtime: runtime)
            try await Task.sleep(for: .seconds(1))
            let press = try Self.ctl(["ptt", "press"], runtime: runtime)
            try await Task.sleep(for: .seconds(1))
            let release = try Self.ctl(["ptt", "release"], runtime: runtime)
            #expect([unmute, mode, press, release].allSatisfy { $0.status == 0 })
            let refused = try Self.ctl(["volume", "carol", "50"], runtime: runtime)
            #expect(refused.status == 2 && refused.output.contains("nobody called 'carol' is in the call; in it: bob"), "\(refused.output)")

            let texts = bob.statistics().texts ?? []
            #expect(texts.map(\.line).contains { $0.hasSuffix("alice: back in five") }, "bob has alice's message: \(texts)")
            let leave = try Self.ctl(["leave"], runtime: runtime)
            #expect(leave.status == 0, "\(leave.output)")
            alice.waitUntilExit()
            #expect(alice.terminationStatus == 0)
            bob.stop()
            _ = await bobResult
            let played = try #require(bob.statistics().playbackStartedAtNanoseconds)
            let heard = Self.audible(try room.received(by: "bob", from: "alice"))
            /// The listener's 10 ms window at a monotonic time.
            func window(_ nanoseconds: UInt64) -> Int { Int((Int64(bitPattern: nanoseconds &- played)) / 10_000_000) }
            /// The time from `origin` to the start of the last audible window before `end`.
            func lastAudible(after origin: UInt64, before end: UInt64) -> Double? {
                let first = window(origin), last = min(window(end), heard.count)
                guard first < last, let index = (first..<last).last(where: { heard[$0] }) else { return nil }
                return Double(index + 1 - first) * 10
            }

            let stopAfterMute = lastAudible(after: mute.returned, before: unmute.started) ?? 0
            let stopAfterStart = lastAudible(after: mute.started, before: unmute.started) ?? 0
            let spawn = Double(mute.returned - mute.started) / 1e6
            print("mute: the listener heard alice for \(stopAfterMute) ms after `parley ctl mute` returned, \(stopAfterStart) ms after it started (it ran \(String(format: "%.0f", spawn)) ms)")
            #expect(stopAfterMute <= 100, "the audio stops within 100 ms of the mute")
            let talkingBefore = heard[window(mute.started - 1_500_000_000)..<window(mute.started - 500_000_000)]
            #expect(talkingBefore.allSatisfy { $0 }, "alice was heard before the mute")
            let mutedWindows = heard[window(mute.returned + 100_000_000)..<window(unmute.started)]
            #expect(mutedWindows.allSatisfy { !$0 }, "nothing while muted")
            let afterUnmute = heard[window(unmute.returned + 200_000_000)..<window(mode.started)]
            #expect(afterUnmute.allSatisfy { $0 }, "heard again after unmute")

            let beforePress = heard[window(mode.returned + 100_000_000)..<window(press.started)]
            let held = heard[window(press.returned + 200_000_000)..<window(release.started)]
            let stopAfterRelease = lastAudible(after: release.returned, before: release.returned + 1_000_000_000) ?? 0
            print("push-to-talk: silent before the press \(beforePress.allSatisfy { !$0 }), heard while held \(held.filter { $0 }.count)/\(held.count) windows, heard \(stopAfterRelease) ms after the release")
            #expect(beforePress.allSatisfy { !$0 }, "nothing before the press")
            #expect(held.allSatisfy { $0 }, "heard while held")
            #expect(stopAfterRelease <= 100, "silent within 100 ms of the release")
        }
    }
}

extension CallRoom {
    /// A 440 Hz tone at 0.3 (a talker easy to measure) and as much silence (a listener), as
    /// WAV files in the room's folder; returns their paths.
    func writeToneAndSilence(seconds: Int) throws -> (tone: String, silence: String) {
        let tone = directory + "/tone.wav"
        let writer = try WAVFileWriter(path: tone)
        try writer.append((0..<(seconds * 48_000)).map { 0.3 * Float(sin(Double($0) * 2 * Double.pi * 440 / 48_000)) })
        try writer.close()
        let silence = directory + "/silence.wav"
        let quiet = try WAVFileWriter(path: silence)
        try quiet.appendSilence(seconds * 48_000)
        try quiet.close()
        return (tone, silence)
    }
}
