import Testing
@testable import ParleyRelay
import ParleyWire

/// The relay's rules for members' state and texts, as plain values with time passed in.
@Suite("Member state and text rules at the relay")
struct MemberStateAndTextRulesTests {
    @Test func aMembersStateReachesTheRosterAndMakesANewVersionOnlyWhenItChanges() {
        var room = Room(name: "standup")
        _ = room.admit(.init(sessionID: 1, identity: "alice", ssrc: 10, canPublish: true), maximumMembers: 10)
        var changed = room.setState(.muted, sessionID: 1)
        #expect(!changed, "a joining member's state waits for the roster that first names it")
        room.activate(sessionID: 1)
        #expect(room.roster.first?.state == .muted)
        let version = room.version
        changed = room.setState(.muted, sessionID: 1)
        #expect(!changed, "the same state is no change")
        changed = room.setState([.muted, .deafened], sessionID: 1)
        #expect(changed && room.version == version &+ 1)
        #expect(room.roster.first?.state == [.muted, .deafened])
        changed = room.setState([], sessionID: 99)
        #expect(!changed, "nobody by that id")
    }

    @Test func aThousandFlipsASecondReachTheRoomAFewTimesAndTheLastStateAlways() {
        var pacer = MemberStatePacer(nowNanoseconds: 0)
        var applied: [ControlMessage.MemberState] = []
        var now: UInt64 = 0
        for flip in 1...1_000 {
            now = UInt64(flip) * 1_000_000
            let taken = pacer.receive(.init(revision: UInt32(flip), state: flip % 2 == 1 ? .muted : []))
            #expect(taken)
            if let state = pacer.due(nowNanoseconds: now) { applied.append(state) }
        }
        #expect(applied.count <= MemberStatePacer.burst + MemberStatePacer.perSecond + 1, "\(applied.count) changes told the room in one second")
        #expect(pacer.isHeldBack || applied.last == [], "the last flip (unmuted) is applied or waiting")
        while pacer.isHeldBack {
            now += 50_000_000
            if let state = pacer.due(nowNanoseconds: now) { applied.append(state) }
        }
        #expect(applied.last == [], "the room ends where the member ended")
    }

    @Test func anOlderRevisionNeverUndoesANewerOne() {
        var pacer = MemberStatePacer(nowNanoseconds: 0)
        let taken = [(5, true), (4, false), (5, false), (6, true)].map { revision, _ in
            pacer.receive(.init(revision: UInt32(revision), state: revision == 5 ? .muted : []))
        }
        #expect(taken == [true, false, false, true], "a late retransmission (4), a repeat (5): neither undoes anything")
        var wrapping = MemberStatePacer(nowNanoseconds: 0)
        let wrapped = [wrapping.receive(.init(revision: UInt32.max, state: .muted)), wrapping.receive(.init(revision: 0, state: []))]
        #expect(wrapped == [true, true], "revisions wrap")
    }

    @Test func aMembersTextsAreRelayedOnceWithinTheirRateAndARepeatGetsTheSameAnswer() {
        var texts = MemberTexts(nowNanoseconds: 0)
        var relayed = 0
        var refusedForRate = 0
        for number in 1...20 {
            guard let (answer, isRepeat) = texts.receive(.init(number: UInt32(number), text: "m\(number)"), nowNanoseconds: 1_000) else {
                Issue.record("a new number was ignored"); continue
            }
            #expect(!isRepeat)
            if answer == .relayed { relayed += 1 } else if case .refused(.refusedRate, _) = answer { refusedForRate += 1 }
        }
        #expect(relayed == MemberTexts.burst && refusedForRate == 20 - MemberTexts.burst)
        let repeated = texts.receive(.init(number: 20, text: "m20"), nowNanoseconds: 10_000_000_000)
        #expect(repeated?.isRepeat == true, "the retransmission of the last gets the answer it had")
        if case .refused(.refusedRate, _)? = repeated?.answer {} else { Issue.record("the repeat was answered differently: \(String(describing: repeated))") }
        #expect(texts.receive(.init(number: 3, text: "m3"), nowNanoseconds: 10_000_000_000) == nil, "an older number is a stray copy")
        let long = texts.receive(.init(number: 21, text: String(repeating: "x", count: 501)), nowNanoseconds: 10_000_000_000)
        if case let .refused(.refusedTooLong, reason)? = long?.answer { #expect(reason.contains("501 bytes")) } else { Issue.record("\(String(describing: long))") }
        let escape = texts.receive(.init(number: 22, text: "\u{1B}[2J"), nowNanoseconds: 10_000_000_000)
        if case .refused(.refusedInvalid, _)? = escape?.answer {} else { Issue.record("\(String(describing: escape))") }
    }

    @Test func textsToALegGoOneAtATimeNumberedInOrderAndABacklogIsBounded() {
        var texts = TextOutbox()
        _ = texts.enqueue(sender: "bob", text: "one")
        _ = texts.enqueue(sender: "cy", text: "two")
        let first = texts.next(sequence: 7)
        let meanwhile = texts.next(sequence: 8)
        #expect(first == .init(number: 1, sender: "bob", text: "one"))
        #expect(meanwhile == nil, "one in flight at a time")
        texts.settled()
        let second = texts.next(sequence: 9)
        #expect(second == .init(number: 2, sender: "cy", text: "two"))
        texts.settled()
        let kept = (0...TextOutbox.maximumQueued).map { texts.enqueue(sender: "bob", text: "\($0)") }
        #expect(kept.dropLast().allSatisfy { $0 } && kept.last == false, "beyond the backlog the oldest goes")
        let oldest = texts.next(sequence: 10)
        #expect(oldest?.text == "1")
    }
}
