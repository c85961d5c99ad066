import Testing
@testable import ParleyClient
import ParleyWire

/// What the link tells the room besides audio, against a scripted relay with the clock in
/// the test's hands: the member's muted/deafened state, and text messages both ways.
@Suite("The link's member state and text messages")
struct RoomMessagesLinkTests {
    /// The control messages the link sent since the last look, opened.
    static func sentMessages(_ harness: inout LinkHarness) throws -> [ControlMessage] {
        defer { harness.sent.removeAll() }
        return try harness.sent.map { try harness.relay.read($0) }
    }

    @Test func aStateChangeIsSentReliablyUntilAcknowledgedAndSealedAfreshEachTime() throws {
        var harness = LinkHarness()
        try harness.join()
        harness.sent.removeAll()
        harness.take(harness.link.setMemberState(.muted, now: harness.now))
        let first = try Self.sentMessages(&harness)
        #expect(first.count == 1 && first[0].isReliable && first[0].body == .memberState(.init(revision: 1, state: .muted)))
        harness.advance(byMilliseconds: 260)
        let again = harness.sent.first.flatMap { try? harness.relay.read($0) }
        #expect(harness.sent.count == 1 && again?.body == first[0].body,
                "unacknowledged, it goes again, sealed with a new counter (the relay drops a replayed datagram)")
        harness.sent.removeAll()
        harness.deliver(try harness.relay.send(.ack(.init(sequence: first[0].sequence))))
        for _ in 0..<10 { harness.advance(byMilliseconds: 300) }
        #expect(try Self.sentMessages(&harness).allSatisfy { if case .memberState = $0.body { false } else { true } }, "acknowledged: no more")
    }

    @Test func flippingMuteAThousandTimesSendsAFewMessagesAndTheLastStateWins() throws {
        var harness = LinkHarness()
        try harness.join()
        harness.sent.removeAll()
        var states: [ControlMessage.MemberStateUpdate] = []
        for flip in 0..<1_000 {
            harness.take(harness.link.setMemberState(flip % 2 == 0 ? .muted : [], now: harness.now))
            if flip % 10 == 0 { harness.advance(byMilliseconds: 1) }  // a thousand flips in 100 ms
            for case let .memberState(update) in try Self.sentMessages(&harness).map(\.body) { states.append(update) }
        }
        harness.take(harness.link.setMemberState([.muted, .deafened], now: harness.now))
        for _ in 0..<5 {
            harness.advance(byMilliseconds: 50)
            for case let .memberState(update) in try Self.sentMessages(&harness).map(\.body) { states.append(update) }
        }
        let distinct = Set(states.map(\.revision))
        #expect(distinct.count <= 3, "at most one new state per \(RoomOutbox.stateIntervalNanoseconds / 1_000_000) ms: \(distinct.count) revisions")
        #expect(states.last?.state == [.muted, .deafened], "the state the person ended on goes out")
        #expect(states.map(\.revision) == states.map(\.revision).sorted(), "revisions count up")
    }

    @Test func aRejoinTellsTheNewSessionTheStateAgain() throws {
        var harness = LinkHarness()
        harness.take(harness.link.setMemberState(.muted, now: harness.now))
        #expect(harness.sent.isEmpty, "nothing before the link is in the room")
        try harness.join()
        let sent = harness.sent.compactMap { datagram -> ControlMessage? in try? harness.relay.read(datagram) }
        #expect(sent.contains { $0.body == .memberState(.init(revision: 1, state: .muted)) }, "set before joining, sent once joined")
    }

    @Test func textsGoOneAtATimeInOrderAndARefusalSaysWhy() throws {
        var harness = LinkHarness()
        try harness.join()
        harness.sent.removeAll()
        harness.take(try harness.link.say("one", now: harness.now))
        harness.take(try harness.link.say("two", now: harness.now))
        let first = try Self.sentMessages(&harness)
        #expect(first.map(\.body) == [.text(.init(number: 1, text: "one"))], "the second waits for the first")
        harness.deliver(try harness.relay.send(.ack(.init(sequence: first[0].sequence))))
        let second = try Self.sentMessages(&harness).filter { if case .text = $0.body { true } else { false } }
        #expect(second.map(\.body) == [.text(.init(number: 2, text: "two"))])
        harness.deliver(try harness.relay.send(.error(.init(code: .rateLimited, message: "more than 8 messages")), sequence: second[0].sequence))
        #expect(harness.events.last == .textRefused(text: "two", reason: "more than 8 messages"))
        #expect(harness.link.phase == .active, "a refused text ends nothing")
    }

    @Test func aTextTooLongTooFastOrOutsideTheRoomIsRefusedAtOnce() throws {
        var harness = LinkHarness()
        #expect(throws: TextRefusal.self) { try harness.link.say("early", now: harness.now) }
        try harness.join()
        #expect(throws: TextRefusal.invalid(ControlMessage.Text.problem(with: String(repeating: "x", count: 501))!)) {
            try harness.link.say(String(repeating: "x", count: 501), now: harness.now)
        }
        for index in 0..<RoomOutbox.textsPerWindow { harness.take(try harness.link.say("m\(index)", now: harness.now)) }
        do {
            _ = try harness.link.say("one too many", now: harness.now)
            Issue.record("a sixth message within the window was accepted")
        } catch {
            #expect(error.description.contains("wait 5 s"), "\(error)")
        }
        harness.now += RoomOutbox.textWindowNanoseconds
        harness.take(try harness.link.say("later", now: harness.now))
    }

    @Test func aTextThatOvertakesTheFirstRosterIsStillShown() throws {
        var harness = LinkHarness()
        harness.start()
        while let last = harness.sent.popLast(), let answer = try harness.relay.answer(last) { harness.deliver(answer) }
        #expect(harness.link.phase == .confirming, "joined, ready sent, the roster not here yet")
        harness.deliver(try harness.relay.send(.text(.init(number: 1, sender: "bob", text: "early")), reliable: true))
        #expect(harness.events.contains(.text(sender: "bob", text: "early")))
    }

    @Test func aTextDeliveredTwiceIsShownOnceAndEachIsAcknowledged() throws {
        var harness = LinkHarness()
        try harness.join()
        harness.events.removeAll()
        harness.sent.removeAll()
        let hello = ControlMessage.Body.text(.init(number: 1, sender: "bob", text: "hello"))
        harness.deliver(try harness.relay.send(hello, reliable: true))
        // The relay heard no acknowledgement and sent it again, with a new sequence number.
        harness.deliver(try harness.relay.send(hello, reliable: true))
        harness.deliver(try harness.relay.send(.text(.init(number: 2, sender: "cy", text: "hi bob")), reliable: true))
        #expect(harness.events == [.text(sender: "bob", text: "hello"), .text(sender: "cy", text: "hi bob")])
        #expect(try Self.sentMessages(&harness).filter { if case .ack = $0.body { true } else { false } }.count == 3)
    }
}
