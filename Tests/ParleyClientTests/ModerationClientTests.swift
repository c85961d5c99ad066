import ParleyWire
import Testing
@testable import ParleyClient

/// A moderator's side of room control: the words `parley ctl` takes, the request the link
/// repeats until the relay answers, and what a removed member's call ends with.
@Suite("Moderation on the client")
struct ModerationClientTests {
    @Test func aModeratorsRequestsReadBackFromTheirOwnLines() throws {
        let controls: [CallControl] = [
            .moderate(.init(action: .serverMute, target: "bob")),
            .moderate(.init(action: .serverUnmute, target: "bob")),
            .moderate(.init(action: .kick, target: "bob")),
            .moderate(.init(action: .kick, target: "bob", banSeconds: 600, reason: "shouting over everyone")),
            .moderate(.init(action: .closeRoom)),
            .moderate(.init(action: .closeRoom, reason: "the meeting is over")),
        ]
        for control in controls { #expect(try CallControl(parsing: control.line) == control, "\(control.line)") }
        #expect(try CallControl(parsing: "kick bob --reason spam --for 2h") == .moderate(.init(action: .kick, target: "bob", reason: "spam --for 2h")),
                "everything after --reason is the reason")
        #expect(try CallControl(parsing: "kick bob --for 90s") == .moderate(.init(action: .kick, target: "bob", banSeconds: 90)))
    }

    @Test func aRequestThatCannotBeCarriedOutSaysWhatWouldHaveBeenRight() {
        let cases: [(String, String)] = [
            ("kick", "the person's name first"),
            ("kick --for 10m", "the person's name first"),
            ("kick bob --for", "needs a duration"),
            ("kick bob --for soon", "at least 1s"),
            ("kick bob --for 8d", "at most 7 days"),
            ("kick bob --loudly", "does not take '--loudly'"),
            ("kick bob --reason", "needs the words"),
            ("kick bob --reason " + String(repeating: "x", count: 161), "at most 160"),
            ("server-mute", "takes the person's name"),
            ("server-mute bob carol", "takes the person's name"),
            ("close-room --for 10m", "does not take '--for'"),
        ]
        for (line, expected) in cases {
            do {
                _ = try CallControl(parsing: line)
                Issue.record("'\(line)' was accepted")
            } catch {
                #expect(error.description.contains(expected), "'\(line)': \(error)")
            }
        }
    }

    @Test func theLinkRepeatsARequestUntilTheRelayAnswersAndReportsTheAnswerOnce() throws {
        var harness = LinkHarness()
        try harness.join()
        harness.sent.removeAll()
        harness.events.removeAll()
        let (sequence, output) = harness.link.moderate(.init(action: .kick, target: "bob"), now: harness.now)
        harness.take(output)
        let number = try #require(sequence)
        #expect(harness.sent.count == 1)
        harness.advance(byMilliseconds: 300)
        let repeats = try harness.sent.map { try harness.relay.read($0) }.filter { $0.body.type == .moderate }
        #expect(repeats.count == 2 && repeats.allSatisfy { $0.sequence == number }, "sent again with the same number")
        let answer = ControlMessage.Body.moderationReply(.init(outcome: .done, message: "bob removed"))
        harness.deliver(try harness.relay.send(answer, sequence: number))
        harness.deliver(try harness.relay.send(answer, sequence: number))
        let answers = harness.events.compactMap { if case let .moderationAnswered(s, reply) = $0 { (s, reply) } else { nil } }
        #expect(answers.count == 1 && answers[0].0 == number && answers[0].1.message == "bob removed")
        harness.sent.removeAll()
        harness.advance(byMilliseconds: 1_000)
        #expect(try harness.sent.map { try harness.relay.read($0) }.allSatisfy { $0.body.type != .moderate }, "answered: not sent again")
    }

    @Test func aRequestTheRelayNeverAnswersIsGivenUpWithAMessage() throws {
        var harness = LinkHarness()
        try harness.join()
        harness.events.removeAll()
        let (sequence, output) = harness.link.moderate(.init(action: .serverMute, target: "bob"), now: harness.now)
        harness.take(output)
        for _ in 0..<40 { harness.advance(byMilliseconds: 100) }
        guard case let .moderationAnswered(answered, reply)? = harness.events.first(where: { if case .moderationAnswered = $0 { true } else { false } }) else {
            Issue.record("no answer after the give-up time"); return
        }
        #expect(answered == sequence && reply.outcome == .unknown && reply.message.contains("did not answer"))
    }

    @Test(arguments: [(ControlMessage.GoodbyeReason.kicked, Int32(12)), (.roomClosed, 13)])
    func aRemovedMemberEndsTheCallWithTheRelaysWordsAndItsOwnExitCode(reason: ControlMessage.GoodbyeReason, code: Int32) throws {
        var harness = LinkHarness()
        try harness.join()
        harness.deliver(try harness.relay.send(.goodbye(.init(reason: reason, message: "ada removed you from standup: spam. You can rejoin in 5 min.")), reliable: true))
        guard case let .failed(failure)? = harness.events.last else { Issue.record("the call goes on: \(harness.events)"); return }
        #expect(failure.exitCode == code)
        #expect(failure.description.contains("ada removed you from standup: spam"), "\(failure)")
        #expect(CallError.link(failure).exitCode == code)
        let banned = LinkFailure.refused(code: .kickedFromRoom, message: "ada removed you from standup; you can rejoin in 4 min")
        #expect(banned.exitCode == 12 && banned.description.contains("rejoin in 4 min"))
    }
}
