import ParleySecurity
import ParleyWire

/// What the relay checks a join against, the same for every loop: the token secret, the
/// relay's side of the encrypted handshake (nil on a relay started `--insecure`), and the
/// cache of handshakes already admitted. Where a verified join then goes, in a cluster, is
/// the ``RoomPlacement``'s to say (``MemberAdmission``).
///
/// ``verify(_:unixSeconds:)`` is plain Swift with the time passed in; the handshake and the
/// replay cache are used by the loop's join handling (``MemberAdmission``) in the
/// order that keeps strangers' work cheap.
struct JoinVerifier: Sendable {
    let secret: TokenSecret
    let handshake: RelayHandshake?
    /// Handshakes admitted in the last two cookie lifetimes, shared by every loop.
    let replayCache: HandshakeReplayCache

    var encrypted: Bool { handshake != nil }

    enum Verdict {
        case verified(AccessToken)
        case refused(ControlMessage.ErrorCode, String, logReason: String)
    }

    /// The checks every join passes, plaintext or inside a handshake: room name and token.
    func verify(_ join: ControlMessage.Join, unixSeconds: Int64) -> Verdict {
        if let problem = ParleyNames.problem(withRoom: join.room) {
            return .refused(.malformedRequest, problem, logReason: "bad room name: \(problem)")
        }
        do {
            return .verified(try AccessToken.verify(join.token, secret: secret, room: join.room, now: unixSeconds))
        } catch {
            return .refused(error.errorCode, error.message, logReason: error.description)
        }
    }
}
