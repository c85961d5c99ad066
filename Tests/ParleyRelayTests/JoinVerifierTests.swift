@testable import ParleyRelay
import ParleySecurity
import ParleyWire
import Testing

/// The checks every join passes, with the time passed in.
@Suite("Join verification")
struct JoinVerifierTests {
    let secret = TokenSecret.random()
    var verifier: JoinVerifier { JoinVerifier(secret: secret, handshake: nil, replayCache: HandshakeReplayCache()) }

    func join(room: String, token: String) -> ControlMessage.Join {
        ControlMessage.Join(ssrc: 1, room: room, token: token, software: "test")
    }

    @Test func aTokenForTheRoomWithinItsTimeIsVerified() {
        let token = AccessToken(identity: "ada", room: "standup", issuedAt: 1_000, expiresAt: 2_000).signed(with: secret)
        guard case let .verified(verified) = verifier.verify(join(room: "standup", token: token), unixSeconds: 1_500) else {
            Issue.record("verified")
            return
        }
        #expect(verified.identity == "ada")
    }

    @Test func anExpiredTokenAnotherRoomsTokenAndABadRoomNameAreRefusedWithAReason() {
        let token = AccessToken(identity: "ada", room: "standup", issuedAt: 1_000, expiresAt: 2_000).signed(with: secret)
        for (room, now) in [("standup", Int64(3_000)), ("retro", Int64(1_500)), ("", Int64(1_500))] {
            guard case let .refused(_, text, logReason) = verifier.verify(join(room: room, token: token), unixSeconds: now) else {
                Issue.record("\(room) at \(now) is refused")
                continue
            }
            #expect(!text.isEmpty && !logReason.isEmpty)
        }
    }
}
