import Foundation
import ParleyClient
import ParleyRelay
import ParleyRelayTestSupport
import ParleySecurity
import ParleyWire
import Testing

/// Answers whose words come from people: a moderator's name and reason, the names in a room.
/// A one-byte length field holds 255 bytes, and a name of 64 bytes and a reason of 160 in
/// three-byte characters say more than that in fewer than 200 characters. Every such answer
/// still goes out, cut at a character boundary, so nobody waits for an answer that never comes.
extension RelayOverUDP {
    @Suite("Answers with long words") struct LongRepliesTests {
        /// A member whose name is 64 bytes of two-byte characters (32 characters).
        static let longName = String(repeating: "é", count: 32)
        /// A reason of 159 bytes, 53 characters of three bytes each.
        static let longReason = String(repeating: "€", count: 53)

        func join(_ fixture: RelayFixture, room: String, _ identity: String, moderator: Bool = false) -> SecureMember {
            SecureMember(relayPort: fixture.port, room: room, token: fixture.token(room: room, identity: identity, isModerator: moderator),
                         relayKey: fixture.relayKey!.publicKey)
        }

        @Test func aKickByALongNameForALongReasonReachesTheMemberAndAnswersItsRejoin() throws {
            let fixture = try RelayFixture.startSecure()
            defer { fixture.relay.shutdown() }
            let moderator = join(fixture, room: "long", Self.longName, moderator: true)
            let bob = join(fixture, room: "long", "bob")
            let members = [moderator, bob]
            #expect(pumpAll(members, timeout: 5) { members.allSatisfy { $0.isActive && $0.link.roster.count == 2 } })

            let kicked = try #require(moderator.moderationAnswer(to: .init(action: .kick, target: "bob", banSeconds: 600, reason: Self.longReason), pumping: members))
            #expect(kicked.outcome == .done, "\(kicked)")
            let told = pumpAll(members, timeout: 3) {
                bob.events.contains { if case .failed(.removed(.kicked, _)) = $0 { return true }; return false }
            }
            #expect(told, "the kicked member is told who removed it and why: \(bob.events.suffix(3))")
            if case let .failed(.removed(_, message))? = bob.events.last {
                print("the kicked member was told: \(message) (\(message.utf8.count) bytes)")
                #expect(message.hasPrefix(Self.longName), "the words start with the moderator's name")
            }

            // The same identity comes back: the relay refuses it, saying so, within the join's
            // first second rather than leaving the handshake unanswered.
            let again = join(fixture, room: "long", "bob")
            again.pump(timeout: 4) { $0.joinedOrFailed() }
            guard case let .failed(failure) = again.link.phase else {
                Issue.record("the rejoin got no answer: \(again.link.phase)")
                return
            }
            print("the rejoin was refused: \(failure)")
            #expect(failure.exitCode == 12, "refused as kicked (exit 12), not 'ask for a fresh invite' (exit 4): \(failure)")
            if case let .refused(code, message) = failure {
                #expect(code == .kickedFromRoom)
                #expect(message.utf8.count <= 255 && message.contains(Self.longName), "cut at a character boundary, naming who: \(message)")
            }
        }

        @Test func aKickOfSomeoneAbsentFromARoomOfLongNamesIsAnsweredWithTheNamesThatFit() throws {
            let fixture = try RelayFixture.startSecure()
            defer { fixture.relay.shutdown() }
            // Five members of 60-byte names: the list of who is in the room runs past 255 bytes.
            let names = (0..<5).map { index in String(repeating: "ü", count: 29) + "\(index)\(index)" }
            let moderator = join(fixture, room: "names", names[0], moderator: true)
            let members = [moderator] + names.dropFirst().map { join(fixture, room: "names", $0) }
            #expect(pumpAll(members, timeout: 5) { members.allSatisfy { $0.isActive && $0.link.roster.count == names.count } })

            let reply = try #require(moderator.moderationAnswer(to: .init(action: .kick, target: "nobody", banSeconds: 60), pumping: members))
            print("no such member: \(reply.outcome) \(reply.message) (\(reply.message.utf8.count) bytes)")
            #expect(reply.outcome == .noSuchMember, "the relay answered, rather than the link giving up waiting: \(reply)")
            #expect(reply.message.contains("nobody") && reply.message.contains(names[0]))
        }
    }
}
