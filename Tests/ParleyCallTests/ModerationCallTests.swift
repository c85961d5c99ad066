import Foundation
import ParleyAudio
import ParleyBasics
import ParleyClient
import ParleyRelay
import ParleyRelayTestSupport
import ParleyWire
import Synchronization
import Testing

/// Room control with real calls over a real relay on 127.0.0.1: a moderator (a token with the
/// `mod` claim) kicks and server-mutes through `parley ctl` and the call's own requests, the
/// relay's operator through `parley-relay admin`. What is asserted is what the people in the
/// call notice: who is in their roster and when, whether a removed member gets back in, and
/// what the others hear of a server-muted member (measured on the recordings).
@Suite("Room control with real calls")
struct ModerationCallTests {
    static var binaries: URL { ControlledCallTests.parley.deletingLastPathComponent() }

    /// Polls every 5 ms until `condition` holds or `timeout` passes; returns when it held. It
    /// looks once more after the deadline, so a poller that was not scheduled for a while (other
    /// suites hogging the test threads) does not take that for the condition never holding.
    static func time(until condition: () -> Bool, timeout: Double) async -> UInt64? {
        let deadline = MonotonicClock.now() + UInt64(timeout * 1e9)
        while true {
            if condition() { return MonotonicClock.now() }
            if MonotonicClock.now() >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Sleeps until `seconds` after `start` (a monotonic time), if that is still to come.
    static func sleep(until seconds: Double, after start: UInt64) async throws {
        let elapsed = Double(MonotonicClock.now() - start) / 1e9
        if elapsed < seconds { try await Task.sleep(for: .milliseconds(Int((seconds - elapsed) * 1_000))) }
    }

    /// The value of the metric line that starts with `name` and carries every label in `labels`.
    static func metric(_ text: String, _ name: String, _ labels: [String]) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(name + "{") && labels.allSatisfy({ line.contains($0) }) {
            return line.split(separator: " ").last.flatMap { Double($0) }
        }
        return nil
    }

    /// Runs one of the built programs; returns its status, what it printed, and when it started and returned.
    static func run(_ program: String, _ arguments: [String], environment: [String: String] = [:]) throws -> (status: Int32, output: String, started: UInt64, returned: UInt64) {
        let process = Process()
        process.executableURL = binaries.appendingPathComponent(program)
        process.arguments = arguments
        process.environment = environment.merging(["PATH": "/usr/bin:/bin"]) { a, _ in a }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        let started = MonotonicClock.now()
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self), started, MonotonicClock.now())
    }

    static func inRoster(_ session: CallSession, _ identity: String) -> Bool { session.statistics().members.contains(identity) }

    @Test func aMemberAModeratorKicksLeavesEveryRosterWithinASecondAndGetsBackInOnlyWhenTheKickRunsOut() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ControlledCallTests.parley.path), "build it first: swift build --build-tests")
        let room = try await CallRoom(room: "moderated")
        defer { Task { await room.close() } }
        let runtime = room.directory + "/runtime"
        try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true)
        let (tone, silence) = try room.writeToneAndSilence(seconds: 20)

        try await CallSlots.shared.withSlot {
            var adaConfiguration = room.configuration(for: "ada", input: .wav(path: silence), durationSeconds: 15)
            adaConfiguration.token = room.token("ada", moderator: true)
            adaConfiguration.controlSocketPath = runtime + "/parley/ada.sock"
            let ada = try CallSession(adaConfiguration)
            let carol = try CallSession(room.configuration(for: "carol", input: .wav(path: silence), durationSeconds: 15))
            let bobConfiguration = room.configuration(for: "bob", input: .wav(path: tone), durationSeconds: 15)
            let bob = try CallSession(bobConfiguration)
            async let adaResult = runOnThread { ada.run() }
            async let carolResult = runOnThread { carol.run() }
            async let bobResult = runOnThread { bob.run() }
            let everyone = await Self.time(until: { [ada, bob, carol].allSatisfy { $0.statistics().members.count == 3 } }, timeout: 10)
            try #require(everyone != nil, "the three never saw each other")

            // Carol's token carries no moderator claim: the relay refuses her, and counts it.
            let refusedKick = carol.perform(.moderate(.init(action: .kick, target: "bob")))
            let refusedMute = carol.perform(.moderate(.init(action: .serverMute, target: "bob")))
            print("carol's kick: \(refusedKick.error ?? "done?")")
            #expect(!refusedKick.ok && refusedKick.error?.contains("does not make you a moderator") == true)
            #expect(!refusedMute.ok)
            let refusals = Self.metric(try room.relay.metricsText(), "parley_relay_moderation_refused_total", [#"source="member""#, #"reason="not_moderator""#])
            #expect(refusals == 2)
            #expect(Self.inRoster(ada, "bob") && Self.inRoster(carol, "bob"), "a refused kick changes nothing")

            // Ada kicks bob for three seconds, from a script.
            let kick = try Self.run("parley", ["ctl", "--call", "ada", "kick", "bob", "--for", "3s", "--reason", "shouting over everyone"],
                                    environment: ["XDG_RUNTIME_DIR": runtime])
            #expect(kick.status == 0 && kick.output.contains("bob removed from moderated"), "\(kick.output)")
            let gone = await Self.time(until: { !Self.inRoster(ada, "bob") && !Self.inRoster(carol, "bob") }, timeout: 3)
            let goneAfter = gone.map { Double($0 - kick.started) / 1e6 }
            print("kick: bob left ada's and carol's rosters \(goneAfter.map { String(format: "%.0f", $0) } ?? "never") ms after `parley ctl kick` started "
                + "(it ran \(String(format: "%.0f", Double(kick.returned - kick.started) / 1e6)) ms)")
            #expect(goneAfter.map { $0 <= 1_000 } == true, "gone from every roster within a second")
            switch await bobResult {
            case .success: Issue.record("bob's call went on")
            case let .failure(error):
                print("bob's call ended: \(error) (exit \(error.exitCode))")
                #expect(error.exitCode == 12)
                #expect(error.description.contains("ada removed you from moderated: shouting over everyone"))
            }

            // The same token, at once: refused, saying for how long.
            switch await runOnThread({ (try? CallSession(bobConfiguration))?.run() }) {
            case let .failure(error)?:
                print("bob rejoining at once: \(error)")
                #expect(error.exitCode == 12 && error.description.contains("you can rejoin in"))
            default: Issue.record("bob got back in while kicked")
            }
            #expect(!Self.inRoster(ada, "bob"))

            // Once the three seconds have run out, the same token gets back in.
            try await Self.sleep(until: 3.3, after: kick.returned)
            var again = bobConfiguration
            again.durationSeconds = 2
            let back = try CallSession(again)
            async let backResult = runOnThread { back.run() }
            #expect(await Self.time(until: { Self.inRoster(ada, "bob") }, timeout: 3) != nil, "bob is back after the kick ran out")
            if case let .failure(error) = await backResult { Issue.record("bob could not rejoin after the kick: \(error)") }
            ada.stop()
            carol.stop()
            _ = await (adaResult, carolResult)
        }
    }

    @Test func theRelaysOperatorListsKicksAndMutesThroughTheAdminAPI() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.binaries.appendingPathComponent("parley-relay").path), "build it first")
        let adminToken = AdminToken.random()
        let room = try await CallRoom(room: "operated", adminToken: adminToken)
        defer { Task { await room.close() } }
        let secretFile = room.directory + "/relay.secret"
        try SecretFile(tokenSecret: room.secret, relayKey: room.relayKey, adminToken: adminToken).write(path: secretFile, overwrite: false)
        let wrongFile = room.directory + "/other.secret"
        try SecretFile.random().write(path: wrongFile, overwrite: false)
        let admin = "127.0.0.1:\(try #require(room.admin?.localAddress?.port))"
        @Sendable func relayAdmin(_ arguments: [String], secret: String? = nil) throws -> (status: Int32, output: String, started: UInt64, returned: UInt64) {
            try Self.run("parley-relay", ["admin"] + [arguments[0], "--admin", admin, "--secret-file", secret ?? secretFile] + arguments.dropFirst())
        }
        let (tone, silence) = try room.writeToneAndSilence(seconds: 20)

        try await CallSlots.shared.withSlot {
            let ada = try CallSession(room.configuration(for: "ada", input: .wav(path: silence), durationSeconds: 12))
            let bobConfiguration = room.configuration(for: "bob", input: .wav(path: tone), durationSeconds: 12)
            let bob = try CallSession(bobConfiguration)
            async let adaResult = runOnThread { ada.run() }
            async let bobResult = runOnThread { bob.run() }
            let met = await Self.time(until: { Self.inRoster(ada, "bob") && Self.inRoster(bob, "ada") }, timeout: 10)
            try #require(met != nil, "ada and bob never met: ada sees \(ada.statistics().members) (\(ada.statistics().phase)), bob \(bob.statistics().members)")
            try await Task.sleep(for: .seconds(1))

            let listing = try relayAdmin(["rooms", "--json"])
            let report = try JSONDecoder().decode(AdminRoomsReport.self, from: Data(listing.output.utf8))
            let listedBob = try #require(report.rooms.first { $0.name == "operated" }?.members.first { $0.identity == "bob" })
            print("rooms: \(listing.output.trimmingCharacters(in: .whitespacesAndNewlines))")
            #expect(listedBob.active && listedBob.packets > 30 && listedBob.bitsPerSecond > 8_000 && listedBob.joinedSecondsAgo >= 1 && !listedBob.serverMuted)
            let table = try relayAdmin(["rooms"])
            #expect(table.status == 0 && table.output.contains("operated: 2 members"), "\(table.output)")

            let wrongToken = try relayAdmin(["rooms"], secret: wrongFile)
            #expect(wrongToken.status == 3 && wrongToken.output.contains("admin token is wrong"), "\(wrongToken.output)")
            let nobody = try relayAdmin(["kick", "operated", "carol"])
            #expect(nobody.status == 4 && nobody.output.contains("nobody called 'carol' is in operated"), "\(nobody.output)")
            let noRoom = try relayAdmin(["mute", "elsewhere", "bob"])
            #expect(noRoom.status == 4, "\(noRoom.output)")

            let mute = try relayAdmin(["mute", "operated", "bob"])
            #expect(mute.status == 0, "\(mute.output)")
            #expect(await Self.time(until: { ada.statistics().serverMuted == ["bob"] && bob.statistics().isServerMuted }, timeout: 1) != nil,
                    "both rosters show the server-mute within a second")
            #expect(try relayAdmin(["unmute", "operated", "bob"]).status == 0)

            let kick = try relayAdmin(["kick", "operated", "bob", "--for", "2s", "--reason", "testing the admin API"])
            #expect(kick.status == 0 && kick.output.contains("bob removed"), "\(kick.output)")
            let gone = await Self.time(until: { !Self.inRoster(ada, "bob") }, timeout: 3)
            let goneAfter = gone.map { Double($0 - kick.started) / 1e6 }
            print("admin kick: bob left ada's roster \(goneAfter.map { String(format: "%.0f", $0) } ?? "never") ms after `parley-relay admin kick` started")
            #expect(goneAfter.map { $0 <= 1_000 } == true)
            if case let .failure(error) = await bobResult {
                #expect(error.exitCode == 12 && error.description.contains("the relay's operator removed you from operated: testing the admin API"), "\(error)")
            } else {
                Issue.record("bob's call went on")
            }
            if case let .failure(error)? = await runOnThread({ (try? CallSession(bobConfiguration))?.run() }) {
                #expect(error.exitCode == 12, "\(error)")
            } else {
                Issue.record("bob got back in while kicked")
            }
            try await Self.sleep(until: 2.3, after: kick.returned)
            var again = bobConfiguration
            again.durationSeconds = 1.5
            let back = try CallSession(again)
            async let backResult = runOnThread { back.run() }
            #expect(await Self.time(until: { Self.inRoster(ada, "bob") }, timeout: 3) != nil, "bob is back after the kick ran out")
            _ = await backResult
            let metrics = try room.relay.metricsText()
            #expect(Self.metric(metrics, "parley_relay_moderation_total", [#"source="admin""#, #"action="kick""#]) == 1)
            #expect(Self.metric(metrics, "parley_relay_members_removed_total", [#"reason="kicked""#]) == 1)
            ada.stop()
            _ = await adaResult
        }
    }

    @Test func aServerMutedMembersAudioReachesNobodyUntilUnmuted() async throws {
        let room = try await CallRoom(room: "muted")
        defer { Task { await room.close() } }
        let (tone, silence) = try room.writeToneAndSilence(seconds: 14)

        try await CallSlots.shared.withSlot {
            var adaConfiguration = room.configuration(for: "ada", input: .wav(path: silence), durationSeconds: 11)
            adaConfiguration.token = room.token("ada", moderator: true)
            let ada = try CallSession(adaConfiguration)
            let carol = try CallSession(room.configuration(for: "carol", input: .wav(path: silence), durationSeconds: 11))
            let notices = NoticeLog()
            let bob = try CallSession(room.configuration(for: "bob", input: .wav(path: tone), durationSeconds: 11)) { notices.add($0) }
            async let adaResult = runOnThread { ada.run() }
            async let carolResult = runOnThread { carol.run() }
            async let bobResult = runOnThread { bob.run() }
            try #require(await Self.time(until: { [ada, bob, carol].allSatisfy { $0.statistics().members.count == 3 } }, timeout: 10) != nil)
            try await Task.sleep(for: .seconds(2))

            let muteStarted = MonotonicClock.now()
            let mute = ada.perform(.moderate(.init(action: .serverMute, target: "bob")))
            let muteReturned = MonotonicClock.now()
            #expect(mute.ok, "\(mute.error ?? "")")
            #expect(await Self.time(until: { carol.statistics().serverMuted == ["bob"] && bob.statistics().isServerMuted }, timeout: 1) != nil)
            try await Task.sleep(for: .milliseconds(2_500))
            let unmuteStarted = MonotonicClock.now()
            let unmute = ada.perform(.moderate(.init(action: .serverUnmute, target: "bob")))
            let unmuteReturned = MonotonicClock.now()
            #expect(unmute.ok)
            try await Task.sleep(for: .seconds(2))
            for session in [ada, bob, carol] { session.stop() }
            _ = await (adaResult, carolResult, bobResult)

            let dropped = Self.metric(try room.relay.metricsText(), "parley_relay_packets_dropped_total", [#"reason="server_muted""#]) ?? 0
            print("server-mute: \(Int(dropped)) of bob's packets dropped at the relay; bob was told: \(notices.lines.filter { $0.contains("moderator") })")
            #expect(dropped > 50)
            #expect(notices.lines.contains { $0.contains("muted by the room's moderator") })
            for (listener, session) in [("ada", ada), ("carol", carol)] {
                let played = try #require(session.statistics().playbackStartedAtNanoseconds)
                let heard = ControlledCallTests.audible(try room.received(by: listener, from: "bob"))
                func window(_ nanoseconds: UInt64) -> Int { min(heard.count, max(0, Int(Int64(bitPattern: nanoseconds &- played) / 10_000_000))) }
                let before = heard[window(muteStarted - 1_500_000_000)..<window(muteStarted)]
                // What was already in flight and in the listener's jitter buffer when the mute
                // took hold still plays (50 ms on an idle machine, 170–240 ms with the machine
                // loaded); from then on nothing of bob arrives.
                let during = heard[window(muteReturned + 500_000_000)..<window(unmuteStarted)]
                let after = heard[window(unmuteReturned + 300_000_000)..<window(unmuteReturned + 1_500_000_000)]
                let lastHeard = heard[window(muteStarted)..<window(unmuteStarted)].lastIndex(of: true).map { Double($0 - window(muteReturned)) * 10 }
                print("\(listener) heard bob: before the mute \(before.filter { $0 }.count)/\(before.count) windows, while muted \(during.filter { $0 }.count)/\(during.count), "
                    + "after the unmute \(after.filter { $0 }.count)/\(after.count); last heard \(lastHeard.map { "\($0) ms" } ?? "–") after the mute returned")
                #expect(!before.isEmpty && before.allSatisfy { $0 }, "\(listener) heard bob before the mute")
                #expect(!during.isEmpty && during.allSatisfy { !$0 }, "\(listener) heard nothing of bob while he was server-muted")
                #expect(!after.isEmpty && after.allSatisfy { $0 }, "\(listener) hears bob again after the unmute")
            }
        }
    }
}

/// Notices a call prints, kept for the test to read.
final class NoticeLog: Sendable {
    private let storage = Mutex<[String]>([])
    func add(_ line: String) { storage.withLock { $0.append(line) } }
    var lines: [String] { storage.withLock { $0 } }
}
