import Foundation
import ParleyAudio
import ParleyBasics
import ParleyClient
import Testing

/// What people see on the call screen, in real terminals (tmux panes running the `parley`
/// binary): who is there, who is muted and why, and figures that are whole at any width.
@Suite("The call screen", .serialized)
struct CallScreenTests {
    typealias Tmux = TerminalCallTests.Tmux

    static let parley = ControlledCallTests.parley.path

    /// The shell command that runs `name`'s call in a pane, its summary (standard output) to a file.
    static func call(_ name: String, in room: CallRoom, input: String, seconds: Int, moderator: Bool = false) -> String {
        let arguments = [
            parley, "call", "--relay", "127.0.0.1:\(room.clientPort)", "--room", room.room, "--token", room.token(name, moderator: moderator),
            "--relay-key=" + room.relayKey.publicKeyText, "--name", name, "--input", input, "--output", room.directory + "/\(name)-heard.wav",
            "--aec", "off", "--duration", "\(seconds)",
        ]
        return "XDG_RUNTIME_DIR=\(Tmux.quote(room.directory)) " + arguments.map(Tmux.quote).joined(separator: " ")
            + " > \(Tmux.quote(room.directory + "/\(name)-summary.txt")); sleep 60"
    }

    static func elapsed(since start: UInt64) -> Double { Double(MonotonicClock.now() - start) / 1e6 }

    /// Three members and a moderator, each at a terminal of their own. The moderator mutes bob
    /// for everyone: every screen says so, and no loss or concealment is counted for it. Bob
    /// leaves with `q` and cy is kicked: both are gone from every screen within a second.
    @Test func whoLeavesOrIsKickedLeavesEveryScreenAndAServerMuteIsAMuteNotALoss() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/tmux"), "tmux is missing: Scripts/bootstrap installs it")
        let room = try await CallRoom(room: "screens")
        defer { Task { await room.close() } }
        let (tone, silence) = try room.writeToneAndSilence(seconds: 40)
        try await CallSlots.shared.withSlot {
            let tmux = Tmux(socket: room.directory + "/tmux.sock")
            #expect(tmux.start(session: "alice", width: 120, height: 16, command: Self.call("alice", in: room, input: silence, seconds: 40)) == 0)
            for (name, input, moderator) in [("bob", tone, false), ("cy", silence, false), ("carol", silence, true)] {
                try tmux.run(["new-session", "-d", "-s", name, "-x", "120", "-y", "16", Self.call(name, in: room, input: input, seconds: 40, moderator: moderator)])
            }
            let everyone = ["alice", "bob", "cy", "carol"]
            for name in everyone {
                let screen = try await tmux.waitFor(name, seconds: 10) { screen in everyone.filter { $0 != name }.allSatisfy { TerminalCallTests.rosterLine(of: $0, in: screen) != nil } }
                #expect(everyone.filter { $0 != name }.allSatisfy { TerminalCallTests.rosterLine(of: $0, in: screen) != nil }, "\(name) sees everyone: \(screen)")
            }
            try await Task.sleep(for: .seconds(3))

            // A moderator's mute: every screen says why bob is silent, and it costs no loss.
            let muted = try ControlledCallTests.ctl(["--call", "carol", "server-mute", "bob"], runtime: room.directory)
            #expect(muted.status == 0, "\(muted.output)")
            for name in ["alice", "cy", "carol"] {
                let screen = try await tmux.waitFor(name, seconds: 2) { TerminalCallTests.rosterLine(of: "bob", in: $0)?.lowercased().contains("muted by moderator") == true }
                #expect(TerminalCallTests.rosterLine(of: "bob", in: screen)?.lowercased().contains("muted by moderator") == true, "\(name)'s screen: \(screen)")
            }
            let bobs = try await tmux.waitFor("MUTED BY THE ROOM'S MODERATOR", on: "bob", seconds: 2)
            #expect(bobs.contains("MUTED BY THE ROOM'S MODERATOR"), "bob's own screen says so: \(bobs)")
            try await Task.sleep(for: .seconds(3))
            let unmuted = try ControlledCallTests.ctl(["--call", "carol", "server-unmute", "bob"], runtime: room.directory)
            #expect(unmuted.status == 0, "\(unmuted.output)")
            try await Task.sleep(for: .seconds(3))
            let afterwards = try tmux.screen("alice")
            let line = TerminalCallTests.rosterLine(of: "bob", in: afterwards) ?? ""
            print("after bob's server-mute, alice's screen:\n\(afterwards)")
            #expect(line.contains("loss 0.0%"), "no loss counted for the muted span: \(line)")
            let status = try ControlledCallTests.ctl(["--call", "alice", "status"], runtime: room.directory)
            let figures = try JSONDecoder().decode(StatusFigures.self, from: Data(status.output.utf8)).speakers.first { $0.identity == "bob" }
            let bob = try #require(figures, "ctl status names bob: \(status.output.prefix(500))")
            print("ctl status, bob after the mute: loss \(bob.lossPercent) %, concealed \(bob.concealedPercent) %")
            #expect(bob.lossPercent == 0 && bob.concealedPercent < 3, "ctl status counts no loss or concealment for the mute")

            // Bob leaves with q; cy is kicked: both gone from every other screen within a second.
            let quit = MonotonicClock.now()
            try tmux.run(["send-keys", "-t", "bob", "q"])
            for name in ["alice", "cy", "carol"] {
                let screen = try await tmux.waitFor(name, seconds: 3) { TerminalCallTests.rosterLine(of: "bob", in: $0) == nil }
                let gone = Self.elapsed(since: quit)
                print("bob left with q: gone from \(name)'s screen after \(Int(gone)) ms")
                #expect(TerminalCallTests.rosterLine(of: "bob", in: screen) == nil && gone < 1_000, "bob gone from \(name)'s screen within 1 s: \(screen)")
            }
            let kick = MonotonicClock.now()
            let kicked = try ControlledCallTests.ctl(["--call", "carol", "kick", "cy", "--for", "1m", "--reason", "testing"], runtime: room.directory)
            #expect(kicked.status == 0, "\(kicked.output)")
            for name in ["alice", "carol"] {
                let screen = try await tmux.waitFor(name, seconds: 3) { TerminalCallTests.rosterLine(of: "cy", in: $0) == nil }
                let gone = Self.elapsed(since: kick)
                print("cy kicked: gone from \(name)'s screen after \(Int(gone)) ms")
                #expect(TerminalCallTests.rosterLine(of: "cy", in: screen) == nil && gone < 1_000, "cy gone from \(name)'s screen within 1 s: \(screen)")
            }
            try await Task.sleep(for: .seconds(2))
            let still = try tmux.screen("alice")
            #expect(TerminalCallTests.rosterLine(of: "bob", in: still) == nil && TerminalCallTests.rosterLine(of: "cy", in: still) == nil,
                    "nobody who left comes back on the screen: \(still)")

            try tmux.run(["send-keys", "-t", "alice", "q"])
            let summary = try await TerminalCallTests.waitForFile(room.directory + "/alice-summary.txt", seconds: 5)
            print("alice's summary:\n\(summary)")
            let fromBob = summary.split(separator: "\n").first { $0.contains("from bob:") }.map(String.init) ?? ""
            #expect(fromBob.contains("lost 0.0% on the way"), "the summary counts no loss for the mute: \(fromBob)")
            let concealed = fromBob.firstMatch(of: /concealed (\d+\.\d)%/).flatMap { Double($0.1) }
            #expect((concealed ?? 100) < 3, "nor concealment: \(fromBob)")
        }
    }

    /// What `parley ctl status` prints: the call's figures, as `--stats-json` writes them.
    struct StatusFigures: Decodable { var speakers: [CallStatistics.Speaker] }

    /// The view at 120, 80 and 60 columns (the window resized under the running call): every
    /// line is whole fields, none cut; fewer columns drop whole fields, the least important
    /// first. A message typed after `/` shows the bytes left and stops at the limit sent.
    @Test func theScreenFitsEveryWidthInWholeFieldsAndATypedMessageStopsAtItsLimit() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/tmux"), "tmux is missing: Scripts/bootstrap installs it")
        let room = try await CallRoom(room: "widths")
        defer { Task { await room.close() } }
        let (tone, silence) = try room.writeToneAndSilence(seconds: 40)
        try await CallSlots.shared.withSlot { try await Self.fitEveryWidth(room: room, tone: tone, silence: silence) }
    }

    static func fitEveryWidth(room: CallRoom, tone: String, silence: String) async throws {
        let tmux = Tmux(socket: room.directory + "/tmux.sock")
        #expect(tmux.start(session: "alice", width: 120, height: 20, command: Self.call("alice", in: room, input: silence, seconds: 40, moderator: true)) == 0)
        let bob = try CallSession(room.configuration(for: "bob", input: .wav(path: tone), durationSeconds: 38))
        let cy = try CallSession(room.configuration(for: "cy", input: .wav(path: silence), durationSeconds: 38))
        let dee = try CallSession(room.configuration(for: "dee", input: .wav(path: silence), durationSeconds: 38))
        let running = DispatchGroup()
        for session in [bob, cy, dee] {
            running.enter()
            Thread.detachNewThread {
                _ = session.run()
                running.leave()
            }
        }
        let ready = try await tmux.waitFor("alice", seconds: 10) { screen in ["bob", "cy", "dee"].allSatisfy { TerminalCallTests.rosterLine(of: $0, in: screen) != nil } }
        #expect(["bob", "cy", "dee"].allSatisfy { TerminalCallTests.rosterLine(of: $0, in: ready) != nil }, "\(ready)")
        _ = cy.perform(.mute)
        _ = dee.perform(.deafen)
        _ = bob.perform(.say("the longest words fit or are cut, never a figure"))
        _ = try ControlledCallTests.ctl(["--call", "alice", "server-mute", "cy"], runtime: room.directory)
        try await Task.sleep(for: .seconds(2))

        var shown: [Int: Set<String>] = [:]
        for width in [120, 80, 60, 120] {
            try tmux.run(["resize-window", "-t", "alice", "-x", "\(width)", "-y", "20"])
            try await Task.sleep(for: .milliseconds(800))
            let screen = try tmux.run(["capture-pane", "-p", "-J", "-t", "alice"])
            print("at \(width) columns:\n\(screen)")
            let parsed = ScreenGrammar.parse(screen, width: width, members: ["bob", "cy", "dee"])
            #expect(parsed.problems.isEmpty, "at \(width) columns: \(parsed.problems)")
            shown[width] = parsed.memberFields
        }
        #expect(shown[120]?.isSuperset(of: ["meter", "activity", "volume", "loss", "jitter", "jb", "concealed"]) == true, "all of a member's figures at 120: \(shown[120] ?? [])")
        #expect(shown[60]?.isSubset(of: shown[80] ?? []) == true && shown[80]?.isSubset(of: shown[120] ?? []) == true, "narrower drops fields, never adds")
        #expect(shown[60]?.isSuperset(of: ["activity", "loss"]) == true, "who is muted and the loss stay at 60: \(shown[60] ?? [])")

        // A message longer than the limit: the screen counts down to 0 and typing stops there.
        try tmux.run(["resize-window", "-t", "alice", "-x", "80", "-y", "20"])
        try tmux.run(["send-keys", "-t", "alice", "/"])
        try tmux.run(["send-keys", "-t", "alice", "-l", String(repeating: "x", count: 100)])
        let counting = try await tmux.waitFor("alice", seconds: 2) { $0.contains("400 bytes left") }
        #expect(counting.contains("400 bytes left"), "the bytes left show while typing: \(counting)")
        try tmux.run(["send-keys", "-t", "alice", "-l", String(repeating: "x", count: 500)])
        let full = try await tmux.waitFor("alice", seconds: 2) { $0.contains("0 bytes left") }
        #expect(full.contains("0 bytes left"), "\(full)")
        try tmux.run(["send-keys", "-t", "alice", "Enter"])
        let sent = try await tmux.waitFor("alice", seconds: 3) { $0.contains("alice: xxx") || $0.contains("not sent") }
        #expect(!sent.contains("not sent"), "what the screen let through is sent: \(sent)")
        let arrived = (bob.statistics().texts ?? []).last { $0.sender == "alice" }
        #expect(arrived?.text == String(repeating: "x", count: 500), "bob got the 500 bytes typed: \(arrived?.text.count ?? 0)")

        bob.stop()
        cy.stop()
        dee.stop()
        running.wait()
        try tmux.run(["send-keys", "-t", "alice", "q"])
    }
}

/// How a reader takes the call screen apart: the call's line of fields between " · ", a
/// line per member of fields two spaces apart, text messages, and the prompt. A field is
/// whole or the line does not parse: `jb` without its figure, `0.0` without its `%`, a
/// figure cut in two. Names may be shortened with "…"; nothing else may.
enum ScreenGrammar {
    static var headFields: [Regex<AnyRegexOutput>] { [
        #"\d+:\d{2}(:\d{2})? in \S+"#, #"joining .+…"#, "reconnecting…", "leaving…", "ended",
        #"you: (LIVE|MUTED|DEAFENED|PUSH-TO-TALK: TALKING|PUSH-TO-TALK: NOT TALKING|MUTED BY THE ROOM'S MODERATOR)"#,
        #"NO .+: waiting for it"#, #"rtt (\d+ ms|–)"#, #"loss up (\d+\.\d%|–)"#, #"\d+ kb/s( \+\d+ copies)?"#, #"xruns \d+"#,
    ].map { try! Regex($0) } }

    static var memberFields: [(String, Regex<AnyRegexOutput>)] { [
        ("meter", #"\[[■ ]{10}\]"#), ("activity", "MUTED BY MODERATOR|muted by moderator|speaking|quiet|silent|MUTED|DEAFENED"),
        ("volume", #"vol +\d+%|muted here"#), ("loss", #"loss \d+\.\d%"#), ("jitter", #"jitter \d+ ms"#), ("jb", #"jb \d+ ms"#),
        ("concealed", #"concealed \d+\.\d%"#),
    ].map { ($0.0, try! Regex($0.1)) } }

    struct Outcome {
        var problems: [String] = []
        /// The kinds of field the member lines showed.
        var memberFields: Set<String> = []
    }

    static func parse(_ screen: String, width: Int, members: [String]) -> Outcome {
        var outcome = Outcome()
        let lines = screen.split(separator: "\n", omittingEmptySubsequences: false).map(String.init).map { $0.replacing(#/ +$/#, with: "") }.filter { !$0.isEmpty }
        guard let head = lines.firstIndex(where: { $0.contains(" · ") && $0.contains("you: ") }) else {
            outcome.problems.append("no call line on the screen")
            return outcome
        }
        for line in lines[head...] {
            if line.count > width { outcome.problems.append("wider than \(width): \(line)") }
            if line == lines[head] {
                for field in line.components(separatedBy: " · ").dropFirst() where !headFields.contains(where: { (try? $0.wholeMatch(in: field)) != nil }) {
                    outcome.problems.append("a cut or unknown field '\(field)' in the call's line: \(line)")
                }
            } else if line.hasPrefix("  ["), (try? #/  \[\d+:\d{2}(:\d{2})?\] [^:]+: .*/#.wholeMatch(in: line)) != nil {
                continue  // a text message: words, which may end cut with "…"
            } else if line.hasPrefix("  ") && !line.hasPrefix("  nobody") {
                parseMember(line, members: members, into: &outcome)
            } else if line.hasPrefix("? keys") || line.hasPrefix("/") || line.hasPrefix(":") || line.hasPrefix("  nobody") || line.hasPrefix("parley call: ") {
                continue
            } else {
                outcome.problems.append("a line that is no part of the view: \(line)")
            }
        }
        return outcome
    }

    static func parseMember(_ line: String, members: [String], into outcome: inout Outcome) {
        var rest = Substring(line.dropFirst(2))
        guard let marker = rest.first, marker == "▸" || marker == " " else {
            outcome.problems.append("a member line without its marker: \(line)")
            return
        }
        rest = rest.dropFirst().drop { $0 == " " }
        guard let name = members.first(where: { rest.hasPrefix($0) }) else {
            outcome.problems.append("a member line with no member's name: \(line)")
            return
        }
        rest = rest.dropFirst(name.count)
        while !rest.isEmpty {
            let spaces = rest.prefix { $0 == " " }.count
            guard spaces >= 2 || rest.allSatisfy({ $0 == " " }) else {
                outcome.problems.append("fields not apart at '\(rest)': \(line)")
                return
            }
            rest = rest.dropFirst(spaces)
            if rest.isEmpty { break }
            let matched = memberFields.compactMap { kind, pattern -> (String, Int)? in
                guard let match = try? pattern.prefixMatch(in: rest) else { return nil }
                let end = match.range.upperBound
                // A field ends at the line's end or at two spaces.
                guard end == rest.endIndex || rest[end...].hasPrefix("  ") else { return nil }
                return (kind, rest.distance(from: rest.startIndex, to: end))
            }.max { $0.1 < $1.1 }
            guard let (kind, length) = matched else {
                outcome.problems.append("a cut or unknown field at '\(rest)': \(line)")
                return
            }
            outcome.memberFields.insert(kind)
            rest = rest.dropFirst(length)
        }
    }
}
