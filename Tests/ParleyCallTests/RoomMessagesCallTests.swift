import Foundation
import ParleyBasics
import ParleyClient
import ParleyNetSim
import ParleyRelayTestSupport
import Synchronization
import Testing

/// Three real calls (`CallSession`s) through a real relay, behind the impairment proxy, over
/// UDP on 127.0.0.1: what each person sees of the others' mute and of the room's messages.
@Suite("Member state and text messages in a real call")
struct RoomMessagesCallTests {
    static let people = ["alice", "bob", "cy"]

    /// Starts a call for each person (silent input, `seconds` long), waits until each sees the
    /// whole room, runs `body`, then ends the calls.
    static func withCalls(scenario: String, room name: String, seconds: Double,
                          onText: @escaping @Sendable (String, RoomText) -> Void = { _, _ in },
                          _ body: @Sendable ([String: CallSession]) async throws -> Void) async throws {
        let room = try await CallRoom(room: name, scenario: try Scenario.named(scenario))
        defer { Task { await room.close() } }
        let (_, silence) = try room.writeToneAndSilence(seconds: Int(seconds) + 2)
        try await CallSlots.shared.withSlot {
            var sessions: [String: CallSession] = [:]
            for person in people {
                var configuration = room.configuration(for: person, input: .wav(path: silence), durationSeconds: seconds)
                configuration.recordReceivedDirectory = nil
                sessions[person] = try CallSession(configuration, onText: { onText(person, $0) })
            }
            let running = sessions
            let results = Task { await withTaskGroup(of: Void.self) { group in
                for session in running.values { group.addTask { _ = await runOnThread { session.run() } } }
            } }
            var everyone = false
            for _ in 0..<100 where !everyone {
                try await Task.sleep(for: .milliseconds(100))
                everyone = sessions.values.allSatisfy { Set($0.statistics().members) == Set(people) }
            }
            try #require(everyone, "the three calls never saw each other")
            try await body(sessions)
            for session in sessions.values { session.stop() }
            await results.value
        }
    }

    @Test func aMuteDeafenOrPushToTalkShowsInTheOthersViewWithinASecond() async throws {
        try await Self.withCalls(scenario: "loss-5", room: "state", seconds: 12) { calls in
            let (alice, bob, cy) = (calls["alice"]!, calls["bob"]!, calls["cy"]!)
            func seen(_ check: @escaping (CallStatistics) -> Bool, by sessions: [CallSession]) async throws -> Double? {
                let start = MonotonicClock.now()
                while MonotonicClock.now() - start < 3_000_000_000 {
                    if sessions.allSatisfy({ check($0.statistics()) }) { return Double(MonotonicClock.now() - start) / 1e6 }
                    try await Task.sleep(for: .milliseconds(10))
                }
                return nil
            }
            let steps: [(String, CallControl, (CallStatistics) -> Bool)] = [
                ("mute", .mute, { $0.mutedMembers?.contains("alice") == true }),
                ("unmute", .unmute, { $0.mutedMembers?.contains("alice") == false }),
                ("deafen", .deafen, { $0.deafenedMembers?.contains("alice") == true }),
                ("undeafen", .undeafen, { $0.deafenedMembers?.contains("alice") == false && $0.mutedMembers?.contains("alice") == false }),
                ("push-to-talk, not talking", .pushToTalkMode(true), { $0.mutedMembers?.contains("alice") == true }),
                ("push-to-talk, talking", .pushToTalkPress, { $0.mutedMembers?.contains("alice") == false }),
            ]
            for (what, control, check) in steps {
                _ = alice.perform(control)
                let delay = try await seen(check, by: [bob, cy])
                print("alice's \(what) reached bob's and cy's rosters after \(delay.map { "\(Int($0)) ms" } ?? "never")")
                #expect(delay.map { $0 <= 1_000 } == true, "alice's \(what) reaches the others within a second")
            }
            _ = alice.perform(.mute)
            _ = try await seen({ $0.mutedMembers?.contains("alice") == true }, by: [bob])
            let line = CallStatusLine.line(bob.statistics())
            #expect(line.contains("muted: alice"), "bob's status line (no terminal) says so: \(line)")
        }
    }

    @Test func textsReachEveryOtherMemberOnceAndInOneOrderOverALossyPathAndTheLimitsSaySo() async throws {
        let heard = Mutex<[String: [RoomText]]>([:])
        try await Self.withCalls(scenario: "loss-20", room: "texts", seconds: 14, onText: { person, text in
            heard.withLock { $0[person, default: []].append(text) }
        }) { calls in
            let (alice, bob) = (calls["alice"]!, calls["bob"]!)
            // Interleaved, as people write: alice four, bob three.
            let script: [(String, CallSession)] = [
                ("alice 1", alice), ("bob 1", bob), ("alice 2", alice), ("alice 3", alice), ("bob 2", bob), ("alice 4", alice), ("bob 3", bob),
            ]
            for (text, session) in script {
                let reply = session.perform(.say(text))
                #expect(reply.ok, "\(text): \(reply)")
                try await Task.sleep(for: .milliseconds(150))
            }
            let tooLong = alice.perform(.say(String(repeating: "x", count: 501)))
            #expect(!tooLong.ok && tooLong.error?.contains("501 bytes; the most is 500") == true, "\(tooLong)")
            _ = alice.perform(.say("alice 5"))
            let tooFast = alice.perform(.say("alice 6"))
            #expect(!tooFast.ok && tooFast.error?.contains("you sent 5 messages in the last 5 s; wait") == true, "\(tooFast)")

            let started = MonotonicClock.now()
            while heard.withLock({ $0["cy", default: []].count < 8 || $0["alice", default: []].count < 3 || $0["bob", default: []].count < 5 }),
                  MonotonicClock.now() - started < 8_000_000_000 {
                try await Task.sleep(for: .milliseconds(50))
            }
            try await Task.sleep(for: .seconds(1))  // any duplicate would have come by now
        }
        let received = heard.withLock { $0 }
        let cy = received["cy", default: []].map(\.text)
        print("over 20% loss each way, cy read: \(cy)")
        #expect(cy.sorted() == ["alice 1", "alice 2", "alice 3", "alice 4", "alice 5", "bob 1", "bob 2", "bob 3"], "every message once")
        #expect(cy.filter { $0.hasPrefix("alice") } == ["alice 1", "alice 2", "alice 3", "alice 4", "alice 5"], "in the order written")
        #expect(cy.filter { $0.hasPrefix("bob") } == ["bob 1", "bob 2", "bob 3"])
        #expect(received["alice", default: []].map(\.text) == cy.filter { $0.hasPrefix("bob") }, "alice reads bob's, once, in the room's order")
        #expect(received["bob", default: []].map(\.text) == cy.filter { $0.hasPrefix("alice") }, "bob reads alice's, once, in the room's order")
        #expect(received.values.joined().allSatisfy { !$0.outgoing && $0.sender == String($0.text.prefix { $0 != " " }) }, "each names who wrote it")
    }
}
