@testable import ParleyRelay
import ParleyRelayTestSupport
import ParleyWire
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Members' state and text messages through a real relay over UDP on 127.0.0.1, with clients
/// that speak the protocol by hand, so the relay's own rules are what is tested (a real
/// client's limits would never let it be refused).
extension RelayOverUDP {
    @Suite("Member state and text messages through the relay")
    struct RoomMessagesOverUDPTests {
        static func texts(_ client: TestClient) -> [ControlMessage.Text] {
            client.controlInbox.compactMap { if case let .text(text) = $0.body { return text }; return nil }
        }

        static func state(of identity: String, seenBy client: TestClient) -> ControlMessage.MemberState? {
            client.latestRoster?.first { $0.identity == identity }?.state
        }

        @Test func aMembersStateReachesTheOthersRosterWithinASecondAndAFloodOfFlipsEndsWhereTheMemberEnded() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let ada = try fixture.member("ada", room: "state")
            let bob = try fixture.member("bob", room: "state")
            #expect(bob.waitForRoster(["ada", "bob"]))

            let sent = now()
            ada.send(ControlMessage(sequence: ada.takeSequence(), isReliable: true, body: .memberState(.init(revision: 1, state: .muted))))
            #expect(bob.pump(timeout: 1) { Self.state(of: "ada", seenBy: $0) == .muted }, "bob's roster shows ada muted within a second")
            print("ada's mute reached bob's roster \(Int((now() - sent) * 1_000)) ms after she sent it")
            #expect(ada.pump(timeout: 1) { $0.controlInbox.contains { if case .ack = $0.body { true } else { false } } }, "the relay acknowledges a state")

            // A thousand flips in about a second, as fast as a script can; then deafened.
            bob.controlInbox.removeAll()
            let floodStart = now()
            for flip in 0..<1_000 {
                ada.send(ControlMessage(sequence: ada.takeSequence(), isReliable: true,
                                        body: .memberState(.init(revision: UInt32(2 + flip), state: flip % 2 == 0 ? [] : .muted))))
                if flip % 50 == 0 { usleep(50_000) }
                bob.drain(quiet: 0)
            }
            // The control budget dropped most of the flood; the last state is sent until it is acknowledged, as a client would.
            let last = ControlMessage.Body.memberState(.init(revision: 2_000, state: [.muted, .deafened]))
            var acknowledged = false
            for _ in 0..<20 where !acknowledged {
                ada.controlInbox.removeAll()
                let sequence = ada.takeSequence()
                ada.send(ControlMessage(sequence: sequence, isReliable: true, body: last))
                acknowledged = ada.pump(timeout: 0.25) { $0.controlInbox.contains { $0.body == .ack(.init(sequence: sequence)) } }
            }
            #expect(acknowledged)
            #expect(bob.pump(timeout: 3) { Self.state(of: "ada", seenBy: $0) == [.muted, .deafened] }, "the room ends at ada's last state")
            let seconds = now() - floodStart
            let rosters = bob.controlInbox.filter { if case .roster = $0.body { true } else { false } }.count
            print("a flood of 1,000 state flips over \(String(format: "%.1f", seconds)) s cost bob \(rosters) rosters")
            #expect(Double(rosters) <= seconds * 4 + 2, "at most 4 rosters a second reach the others, however fast one member flips")
        }

        @Test func textsReachEveryOtherMemberOnceInOneOrderAndOnlyMembersThatReadText() throws {
            let fixture = try RelayFixture.start(threads: 2)
            defer { fixture.relay.shutdown() }
            let members = try ["ada", "bob", "cy"].map { try fixture.member($0, room: "texts", capabilities: .textMessages) }
            let old = try fixture.member("old", room: "texts")  // an older client: offers no text
            for member in members + [old] { #expect(member.waitForRoster(["ada", "bob", "cy", "old"])) }
            let (ada, bob, cy) = (members[0], members[1], members[2])
            for round in 1...3 {
                ada.send(ControlMessage(sequence: ada.takeSequence(), isReliable: true, body: .text(.init(number: UInt32(round), text: "ada \(round)"))))
                bob.send(ControlMessage(sequence: bob.takeSequence(), isReliable: true, body: .text(.init(number: UInt32(round), text: "bob \(round)"))))
                // Each side sends one text at a time: wait for the relay's acknowledgement.
                for sender in [ada, bob] { sender.pump(timeout: 1) { $0.controlInbox.contains { if case .ack = $0.body { true } else { false } } } }
                for sender in [ada, bob] { sender.controlInbox.removeAll { if case .ack = $0.body { true } else { false } } }
            }
            cy.pump(timeout: 3) { Self.texts($0).count >= 6 }
            ada.pump(timeout: 3) { Self.texts($0).count >= 3 }
            bob.pump(timeout: 3) { Self.texts($0).count >= 3 }
            old.drain(quiet: 0.3)
            let heardByCy = Self.texts(cy)
            #expect(heardByCy.map(\.number) == Array(1...6), "numbered in the order delivered, each once: \(heardByCy)")
            #expect(heardByCy.filter { $0.sender == "ada" }.map(\.text) == ["ada 1", "ada 2", "ada 3"])
            #expect(heardByCy.filter { $0.sender == "bob" }.map(\.text) == ["bob 1", "bob 2", "bob 3"])
            #expect(Self.texts(ada).map(\.text) == ["bob 1", "bob 2", "bob 3"], "nobody hears their own")
            #expect(Self.texts(bob).map(\.text) == ["ada 1", "ada 2", "ada 3"])
            #expect(Self.texts(old).isEmpty, "an older client, which could not read them, is sent none")
            let metrics = try fixture.relay.metricsText()
            #expect(metricValue(metrics, #"parley_relay_text_messages_total{result="relayed"}"#) == 6)
        }

        @Test func aMemberIsSentTheNextTextOnlyOnceItAcknowledgedTheLast() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let ada = try fixture.member("ada", room: "acks", capabilities: .textMessages)
            let bob = try fixture.member("bob", room: "acks", capabilities: .textMessages)
            #expect(bob.waitForRoster(["ada", "bob"]))
            bob.autoAck = false
            for number in 1...2 {
                ada.send(ControlMessage(sequence: ada.takeSequence(), isReliable: true, body: .text(.init(number: UInt32(number), text: "t\(number)"))))
                ada.pump(timeout: 1) { $0.controlInbox.contains { if case .ack = $0.body { true } else { false } } }
                ada.controlInbox.removeAll()
            }
            bob.pump(timeout: 0.9)
            let unacknowledged = Self.texts(bob)
            #expect(unacknowledged.count >= 2 && unacknowledged.allSatisfy { $0.number == 1 }, "text 1 again and again, text 2 held: \(unacknowledged.map(\.number))")
            let inFlight = try #require(bob.controlInbox.last { if case .text = $0.body { true } else { false } })
            bob.send(ControlMessage(body: .ack(.init(sequence: inFlight.sequence))))
            #expect(bob.pump(timeout: 1) { Self.texts($0).contains { $0.number == 2 && $0.text == "t2" } }, "acknowledged, the next comes")
        }

        @Test func aTextFloodOrAnOversizedTextIsRefusedWithAnErrorThatSaysWhyAndIsCounted() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let ada = try fixture.member("ada", room: "flood", capabilities: .textMessages)
            let bob = try fixture.member("bob", room: "flood", capabilities: .textMessages)
            #expect(bob.waitForRoster(["ada", "bob"]) && ada.waitForRoster(["ada", "bob"]))
            ada.drain()
            ada.controlInbox.removeAll()
            var sequences: [UInt32] = []
            for number in 1...12 {
                let sequence = ada.takeSequence()
                sequences.append(sequence)
                ada.send(ControlMessage(sequence: sequence, isReliable: true, body: .text(.init(number: UInt32(number), text: "spam \(number)"))))
            }
            ada.pump(timeout: 2) { client in
                client.controlInbox.filter { switch $0.body { case .ack, .error: true; default: false } }.count >= 12
            }
            let answers = ada.controlInbox
            let refusals = answers.compactMap { message -> (UInt32, ControlMessage.ErrorReply)? in
                if case let .error(error) = message.body { return (message.sequence, error) }
                return nil
            }
            #expect(answers.filter { if case .ack = $0.body { true } else { false } }.count == MemberTexts.burst)
            #expect(refusals.map(\.0) == Array(sequences.suffix(12 - MemberTexts.burst)), "each refusal answers its text's sequence number")
            #expect(refusals.allSatisfy { $0.1.code == .rateLimited && $0.1.message.contains("wait a moment") }, "\(refusals.map(\.1.message))")

            ada.controlInbox.removeAll()
            let sequence = ada.takeSequence()
            ada.send(ControlMessage(sequence: sequence, isReliable: true, body: .text(.init(number: 13, text: String(repeating: "é", count: 300)))))
            ada.pump(timeout: 1) { !$0.controlInbox.isEmpty }
            guard case let .error(tooLong)? = ada.controlInbox.first?.body else { Issue.record("no answer to an oversized text: \(ada.controlInbox)"); return }
            #expect(tooLong.code == .malformedRequest && tooLong.message.contains("600 bytes; the most is 500"), "\(tooLong.message)")

            bob.pump(timeout: 2) { Self.texts($0).count >= MemberTexts.burst }
            bob.drain(quiet: 0.3)
            #expect(Self.texts(bob).map(\.text) == (1...MemberTexts.burst).map { "spam \($0)" }, "bob receives what was relayed, nothing refused")
            let metrics = try fixture.relay.metricsText()
            #expect(metricValue(metrics, #"parley_relay_text_messages_total{result="relayed"}"#) == Double(MemberTexts.burst))
            #expect(metricValue(metrics, #"parley_relay_text_messages_total{result="refused_rate"}"#) == Double(12 - MemberTexts.burst))
            #expect(metricValue(metrics, #"parley_relay_text_messages_total{result="refused_too_long"}"#) == 1)
        }
    }
}
