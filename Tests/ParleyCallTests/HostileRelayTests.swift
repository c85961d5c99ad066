import Foundation
import ParleyAudio
import ParleyClient
import ParleyRelay
import ParleyWire
import Testing

/// A relay is trusted with the audio, not with a person's terminal. A relay named in an
/// invite someone accepted, or a relay of the room behind a trunk, sends every string field
/// it can with escape sequences, OSC, C1 controls, bells, bidirectional overrides and
/// zero-width characters; what reaches the person's terminal (every byte tmux received for
/// the pane) and what a script reads from `parley call` and `parley ctl` carries none of them
/// raw: each is shown as `\u{…}`.
@Suite("What a hostile relay can put on a screen", .serialized)
struct HostileRelayTests {
    static let parley = ControlledCallTests.parley.path

    static func folder(_ name: String) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-\(name)-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    static func silence(in directory: String, seconds: Int) throws -> String {
        let path = directory + "/silence.wav"
        let writer = try WAVFileWriter(path: path)
        try writer.appendSilence(seconds * 48_000)
        try writer.close()
        return path
    }

    static func callArguments(relay: String, room: String, token: String, key: String, directory: String, input: String, seconds: Int) -> [String] {
        ["call", "--relay", relay, "--room", room, "--token", token, "--relay-key=" + key, "--name", "victim", "--input", input,
         "--output", directory + "/heard.wav", "--aec", "off", "--duration", "\(seconds)"]
    }

    /// `parley ctl ARGS` against the call in `runtime`: its status and every byte it printed.
    static func ctl(_ arguments: [String], runtime: String) throws -> (status: Int32, output: [UInt8]) {
        let result = try ControlledCallTests.ctl(["--call", "victim"] + arguments, runtime: runtime)
        return (result.status, Array(result.output.utf8))
    }

    @Test func aHostileRelayPutsNothingRawOnTheTerminal() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/tmux"), "tmux is missing: Scripts/bootstrap installs it")
        let directory = try Self.folder("hostile-terminal")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let relay = HostileRelay(room: "hostile")
        defer { relay.stop() }
        let input = try Self.silence(in: directory, seconds: 30)
        let tmux = TerminalCallTests.Tmux(socket: directory + "/tmux.sock")
        let raw = directory + "/pane.bin"
        let exit = directory + "/exit.txt"
        let command = (["sleep 0.5;", "XDG_RUNTIME_DIR=\(TerminalCallTests.Tmux.quote(directory))", Self.parley]
            + Self.callArguments(relay: relay.address, room: "hostile", token: "t", key: relay.key.publicKeyText, directory: directory, input: input, seconds: 30)
                .map(TerminalCallTests.Tmux.quote)).joined(separator: " ") + "; echo $? > \(TerminalCallTests.Tmux.quote(exit)); sleep 30"
        #expect(tmux.start(session: "call", width: 160, height: 40, command: command) == 0)
        try tmux.run(["pipe-pane", "-o", "-t", "call", "cat >> \(TerminalCallTests.Tmux.quote(raw))"])

        let joined = try await tmux.waitFor("call", seconds: 8) { $0.contains("zw") && $0.contains("from 5") }
        print("the screen with a hostile relay's roster and texts:\n\(joined)")
        #expect(joined.contains("\\u{1b}") && joined.contains("\\u{202e}") && joined.contains("\\u{200b}"), "the hostile characters are shown, escaped")

        let said = try Self.ctl(["say", "hello"], runtime: directory)
        let refused = try await tmux.waitFor("refused", seconds: 3)
        #expect(refused.contains("refused"), "the relay's refusal is shown: \(said)")
        let moderated = try Self.ctl(["kick", "osc"], runtime: directory)
        let status = try Self.ctl(["status"], runtime: directory)
        relay.kick()
        let code = try await TerminalCallTests.waitForFile(exit, seconds: 8)
        #expect(code.trimmingCharacters(in: .whitespacesAndNewlines) == "12", "the call ends as a kick does: exit \(code)")
        try await Task.sleep(for: .milliseconds(300))

        let bytes = Array((try? Data(contentsOf: URL(fileURLWithPath: raw))) ?? Data())
        #expect(bytes.count > 1_000, "tmux received the call's output: \(bytes.count) bytes")
        let problems = HostileText.problems(in: bytes, terminal: true)
        #expect(problems.isEmpty, "what the terminal received: \(problems)")
        for (name, output) in [("parley ctl kick", moderated.output), ("parley ctl status", status.output)] {
            let found = HostileText.problems(in: output, terminal: false)
            #expect(found.isEmpty, "\(name) printed: \(found) \(String(decoding: output.prefix(300), as: UTF8.self).debugDescription)")
        }
    }

    @Test func aHostileRelayPutsNothingRawInWhatAScriptReads() async throws {
        let directory = try Self.folder("hostile-stream")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let input = try Self.silence(in: directory, seconds: 20)
        for redirecting in [false, true] {
            let relay = HostileRelay(room: "hostile", redirecting: redirecting)
            defer { relay.stop() }
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Self.parley)
            process.arguments = Self.callArguments(relay: relay.address, room: "hostile", token: "t", key: relay.key.publicKeyText, directory: directory,
                                                   input: input, seconds: 20) + ["--status-interval", "0.2"]
            process.environment = ["XDG_RUNTIME_DIR": directory, "PATH": "/usr/bin:/bin"]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = output
            let collected = OutputCollector(output.fileHandleForReading)
            try process.run()
            try await Task.sleep(for: .seconds(2))
            var printed: [(String, [UInt8])] = []
            if !redirecting {
                _ = try Self.ctl(["say", "hello"], runtime: directory)
                printed.append(("parley ctl kick", try Self.ctl(["kick", "osc"], runtime: directory).output))
                printed.append(("parley ctl status", try Self.ctl(["status"], runtime: directory).output))
                try await Task.sleep(for: .milliseconds(500))
                relay.kick()
            } else {
                process.interrupt()
            }
            for _ in 0..<100 where process.isRunning { try await Task.sleep(for: .milliseconds(100)) }
            if process.isRunning { process.terminate() }
            process.waitUntilExit()
            let bytes = collected.finish()
            let text = String(decoding: bytes, as: UTF8.self)
            print("parley call's output with a hostile relay\(redirecting ? " that redirects" : ""):\n\(text.prefix(2_500))")
            #expect(text.contains(redirecting ? "relay\\u{1b}" : "me\\u{1b}"), "the hostile words are there, escaped")
            #expect(HostileText.problems(in: bytes, terminal: false).isEmpty, "\(HostileText.problems(in: bytes, terminal: false))")
            for (name, output) in printed {
                let found = HostileText.problems(in: output, terminal: false)
                #expect(found.isEmpty, "\(name) printed: \(found) \(String(decoding: output.prefix(300), as: UTF8.self).debugDescription)")
            }
        }
    }

    /// An honest relay passes on what the relays of the room announce: the names behind a
    /// trunk are checked as a member's are (a name with control, bidirectional or format
    /// characters is not admitted), and a text's words reach the screen escaped.
    @Test func namesFromAHostileRelayOfTheRoomAreRefusedAndItsTextsShownEscaped() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/tmux"), "tmux is missing: Scripts/bootstrap installs it")
        let room = try await CallRoom(room: "trunked")
        defer { Task { await room.close() } }
        let peer = HostileTrunkPeer()
        room.relay.setTrustedRelays([RelayPeer(address: HostAndPort(host: "127.0.0.1", port: peer.port), publicKey: peer.key.publicKey)])
        let (_, silence) = try room.writeToneAndSilence(seconds: 20)
        let tmux = TerminalCallTests.Tmux(socket: room.directory + "/tmux.sock")
        let raw = room.directory + "/pane.bin"
        let command = (["sleep 0.5;", "XDG_RUNTIME_DIR=\(TerminalCallTests.Tmux.quote(room.directory))", Self.parley]
            + Self.callArguments(relay: "127.0.0.1:\(room.relayPort)", room: room.room, token: room.token("victim"), key: room.relayKey.publicKeyText,
                                 directory: room.directory, input: silence, seconds: 15).map(TerminalCallTests.Tmux.quote)).joined(separator: " ") + "; sleep 30"
        #expect(tmux.start(session: "call", width: 160, height: 40, command: command) == 0)
        try tmux.run(["pipe-pane", "-o", "-t", "call", "cat >> \(TerminalCallTests.Tmux.quote(raw))"])
        _ = try await tmux.waitFor("nobody else", seconds: 8)

        try peer.open(room: room.room, relayPort: room.relayPort, relayKey: room.relayKey)
        var members = [ControlMessage.Roster.Member(ssrc: 0xE0E0, identity: "eve", canPublish: true)]
        for (index, name) in HostileRelay.others.enumerated() {
            members.append(.init(ssrc: 0xE100 + UInt32(index), identity: name, canPublish: true))
        }
        members.append(.init(ssrc: 0xE200, identity: "ad\u{200B}min", canPublish: true))
        peer.send(.roster(.init(version: 1, members: members)))
        peer.send(.text(.init(number: 1, sender: "eve", text: "trust \u{202E}me\u{200B} now")))
        peer.send(.text(.init(number: 2, sender: HostileRelay.others[0], text: "from a hostile name")))
        peer.keepAlive(for: 1.5)
        let screen = try await tmux.waitFor("call", seconds: 3) { $0.contains("eve") && $0.contains("trust") }
        print("the screen with a hostile relay behind a trunk:\n\(screen)")
        #expect(TerminalCallTests.rosterLine(of: "eve", in: screen) != nil, "the member with a sound name is in the roster")
        #expect(!screen.contains("esc") && !screen.contains("admin") && !screen.contains("ad\\u{200b}min"), "no member with a hostile name is")
        #expect(screen.contains("trust \\u{202e}me\\u{200b} now"), "a text's bidirectional and zero-width characters are shown escaped")
        #expect(!screen.contains("from a hostile name"), "nor a text from a hostile name")
        let metrics = try room.relay.metricsText()
        print(metrics.split(separator: "\n").filter { $0.contains("dropped_total") && $0.contains("trunk") || $0.contains("malformed") }.joined(separator: "\n"))

        let bytes = Array((try? Data(contentsOf: URL(fileURLWithPath: raw))) ?? Data())
        let problems = HostileText.problems(in: bytes, terminal: true)
        #expect(problems.isEmpty, "what the terminal received: \(problems)")
    }
}

/// Reads a pipe to its end on a thread of its own, so the writer never blocks on a full pipe.
final class OutputCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var bytes: [UInt8] = []
    private let done = DispatchSemaphore(value: 0)

    init(_ handle: FileHandle) {
        Thread.detachNewThread { [self] in
            let data = handle.readDataToEndOfFile()
            lock.withLock { bytes = Array(data) }
            done.signal()
        }
    }

    func finish() -> [UInt8] {
        done.wait()
        return lock.withLock { bytes }
    }
}
