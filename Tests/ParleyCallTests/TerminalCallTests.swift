import Foundation
import ParleyAudio
import ParleyBasics
import ParleyClient
import ParleyRelayTestSupport
import Testing

/// A person at a real `parley call` in a real terminal (tmux: keys in with send-keys, the
/// screen out with capture-pane), talking a tone into the call while another member listens.
@Suite("A call on a terminal")
struct TerminalCallTests {
    /// A tmux server of this test's own (its socket in the test's folder), stopped at the end.
    final class Tmux {
        let socket: String

        init(socket: String) { self.socket = socket }

        @discardableResult
        func run(_ arguments: [String]) throws -> String {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/tmux")
            process.arguments = ["-S", socket] + arguments
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            try process.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return String(decoding: data, as: UTF8.self)
        }

        /// Starts the server with its first session. Through the shell's `system`, not
        /// `Process`: a tmux server started by Foundation's `Process` refuses every later
        /// client (ECONNREFUSED on its socket), while one started through the shell serves them.
        func start(session: String, width: Int, height: Int, command: String) -> Int32 {
            system("/usr/bin/tmux -S \(Self.quote(socket)) new-session -d -s \(session) -x \(width) -y \(height) \(Self.quote(command))")
        }

        static func quote(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }

        func screen(_ session: String = "call") throws -> String { try run(["capture-pane", "-p", "-t", session]) }

        /// Waits up to `seconds` for `session`'s screen to show what `shows` looks for; returns the last screen.
        func waitFor(_ session: String = "call", seconds: Double, until shows: (String) -> Bool) async throws -> String {
            var screen = ""
            for _ in 0..<Int(seconds * 20) {
                screen = try self.screen(session)
                if shows(screen) { return screen }
                try await Task.sleep(for: .milliseconds(50))
            }
            return screen
        }

        func waitFor(_ text: String, on session: String = "call", seconds: Double) async throws -> String {
            try await waitFor(session, seconds: seconds) { $0.contains(text) }
        }

        deinit { _ = try? run(["kill-server"]) }
    }

    /// The line of `screen` that shows `identity` in the roster.
    static func rosterLine(of identity: String, in screen: String) -> String? {
        screen.split(separator: "\n").map(String.init).first { $0.hasPrefix("  ") && $0.dropFirst(2).drop { $0 == "▸" || $0 == " " }.hasPrefix(identity + " ") }
    }

    @Test func theRosterShowsTheRoomAndMKeyMutesWhatTheOthersHearAndQLeavesWithTheTerminalRestored() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/tmux"), "tmux is missing: Scripts/bootstrap installs it")
        let parley = ControlledCallTests.parley.path
        let room = try await CallRoom(room: "terminal")
        defer { Task { await room.close() } }
        let (tone, silence) = try room.writeToneAndSilence(seconds: 12)
        let afterwards = room.directory + "/stty-after.txt"
        // Were the program to crash, its backtrace goes here rather than wait for a key in the pane.
        let crashes = room.directory + "/crash.txt"

        try await CallSlots.shared.withSlot {
            let bob = try CallSession(room.configuration(for: "bob", input: .wav(path: silence), durationSeconds: 11))
            async let bobResult = runOnThread { bob.run() }

            let tmux = Tmux(socket: room.directory + "/tmux.sock")
            func call(_ name: String, input: String) -> String {
                [
                    parley, "call", "--relay", "127.0.0.1:\(room.clientPort)", "--room", room.room, "--token", room.token(name),
                    "--relay-key=" + room.relayKey.publicKeyText, "--name", name, "--input", input, "--output", room.directory + "/\(name)-heard.wav",
                    "--aec", "off", "--duration", "10",
                ].map(Tmux.quote).joined(separator: " ")
            }
            // After the call the same shell records the terminal's settings: raw mode must be gone.
            let started = tmux.start(
                session: "call", width: 120, height: 20,
                command: "SWIFT_BACKTRACE=interactive=no,output-to=\(Tmux.quote(crashes)) XDG_RUNTIME_DIR=\(Tmux.quote(room.directory)) \(call("alice", input: tone)); stty -a > \(Tmux.quote(afterwards)); sleep 30")
            #expect(started == 0)
            // A third person at a terminal of their own (a second tmux session), who sees what alice does.
            try FileManager.default.createDirectory(atPath: room.directory + "/cy", withIntermediateDirectories: true)
            try tmux.run(["new-session", "-d", "-s", "other", "-x", "120", "-y", "20",
                          "XDG_RUNTIME_DIR=\(Tmux.quote(room.directory + "/cy")) \(call("cy", input: silence)); sleep 30"])
            let roster = try await tmux.waitFor("bob", seconds: 8)
            print("the roster:\n\(roster)")
            #expect(roster.contains("alice · 0:") && roster.contains("you: LIVE"), "the call's line")
            #expect(roster.contains("  bob ") || roster.contains("▸ bob"), "bob in the roster")
            try await Task.sleep(for: .seconds(2))

            // The key counts as pressed when tmux has written it to the call's terminal, as a
            // keyboard's would be: starting the `tmux send-keys` process is the test's own cost
            // (tens of milliseconds on a loaded machine), not the call's.
            let sending = MonotonicClock.now()
            try tmux.run(["send-keys", "-t", "call", "m"])
            let pressed = MonotonicClock.now()
            print("key m: tmux took \(Double(pressed - sending) / 1e6) ms to write the key to the terminal")
            let mutedScreen = try await tmux.waitFor("you: MUTED", seconds: 2)
            let shown = MonotonicClock.now()
            #expect(mutedScreen.contains("you: MUTED"), "the roster shows the mute: \(mutedScreen)")
            // …and the other person's roster, through the relay, shows alice muted.
            let othersScreen = try await tmux.waitFor("other", seconds: 2) { Self.rosterLine(of: "alice", in: $0)?.contains("MUTED") == true }
            let seenByCy = MonotonicClock.now()
            #expect(Self.rosterLine(of: "alice", in: othersScreen)?.contains("MUTED") == true, "cy's roster shows alice muted: \(othersScreen)")
            print("key m: cy's own terminal showed alice MUTED \(Double(seenByCy - pressed) / 1e6) ms after the key was sent")
            try tmux.run(["send-keys", "-t", "call", "/hello from alice", "Enter"])
            let message = try await tmux.waitFor("alice: hello from alice", on: "other", seconds: 3)
            #expect(message.contains("alice: hello from alice"), "a message typed after / shows in the other's view: \(message)")
            // Alice stays muted in the call for 1.5 s after the key, the span the listener's recording is judged over.
            let sinceKey = Double(MonotonicClock.now() - pressed) / 1e9
            if sinceKey < 1.6 { try await Task.sleep(for: .seconds(1.6 - sinceKey)) }
            try tmux.run(["send-keys", "-t", "call", ":volume bob 50", "Enter"])
            let typed = try await tmux.waitFor("vol  50%", seconds: 3)
            #expect(typed.contains("bob at 50%") && typed.contains("vol  50%"), "a typed request acts and says so: \(typed)")
            try tmux.run(["send-keys", "-t", "call", "?"])
            let help = try await tmux.waitFor("q leave", seconds: 2)
            #expect(help.contains("m mute") && help.contains("q leave"), "? shows the keys")
            try tmux.run(["send-keys", "-t", "call", "q"])

            let restored = try await Self.waitForFile(afterwards, seconds: 8)
            #expect(restored.contains(" icanon") && restored.contains(" echo "), "the terminal is back in line mode with echo: \(restored.prefix(400))")
            #expect(!FileManager.default.fileExists(atPath: crashes), "parley call crashed: \((try? String(contentsOfFile: crashes, encoding: .utf8))?.prefix(3_000) ?? "")")
            bob.stop()
            _ = await bobResult
            let played = try #require(bob.statistics().playbackStartedAtNanoseconds)
            let heard = ControlledCallTests.audible(try room.received(by: "bob", from: "alice"))
            func window(_ nanoseconds: UInt64) -> Int { Int(Int64(bitPattern: nanoseconds &- played) / 10_000_000) }
            let start = window(pressed)
            let lastAudible = (start..<min(window(pressed + 1_500_000_000), heard.count)).last { heard[$0] }
            let heardFor = lastAudible.map { Double($0 + 1 - start) * 10 } ?? 0
            print("key m: the listener heard alice for \(heardFor) ms after the key was sent; the roster showed MUTED \(Double(shown - pressed) / 1e6) ms after")
            try #require(heard.count > window(pressed + 1_500_000_000), "bob's recording of alice is too short: \(heard.count) windows")
            #expect(heard[window(pressed - 1_500_000_000)..<window(pressed - 500_000_000)].allSatisfy { $0 }, "alice was heard before")
            #expect(heardFor <= 100, "muting stops what the others hear within 100 ms")
        }
    }

    static func waitForFile(_ path: String, seconds: Double) async throws -> String {
        for _ in 0..<Int(seconds * 10) {
            if let text = try? String(contentsOfFile: path, encoding: .utf8), !text.isEmpty { return text }
            try await Task.sleep(for: .milliseconds(100))
        }
        return ""
    }
}
