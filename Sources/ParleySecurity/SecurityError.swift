/// Why the secure transport refused something. Handshake failures are deliberately coarse
/// towards the network (the relay answers none of them) but precise in logs and tests.
public enum SecurityError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The bytes are not a well-formed message of the expected kind.
    case malformed(String)
    /// Authentication failed: wrong key, tampered bytes, or truncated ciphertext.
    case authenticationFailed
    /// The counter was seen before or is too far behind the window.
    case replayed(counter: UInt64)
    /// The address cookie is wrong for this address, or older than its lifetime.
    case invalidCookie
    /// This handshake (its ephemeral key) was already accepted once.
    case replayedHandshake
    /// A Diffie-Hellman result was all zeros (a low-order point).
    case invalidPublicKey
    /// The session has sent as many packets as one key may protect; rekey or rejoin.
    case counterExhausted
    /// A key file or key text could not be read.
    case badKey(String)
    /// The relay answered with a key other than the one the invite pins.
    case relayKeyMismatch(presentedKeyID: [UInt8])
    /// A trunk handshake came from a relay key that is not in the trusted-relay set.
    case untrustedPeer

    public var description: String {
        switch self {
        case let .malformed(what): return "malformed secure message: \(what)"
        case .authenticationFailed: return "authentication failed (wrong key or tampered packet)"
        case let .replayed(counter): return "replayed or too old packet (counter \(counter))"
        case .invalidCookie: return "address cookie is invalid or expired"
        case .replayedHandshake: return "handshake was replayed"
        case .invalidPublicKey: return "peer sent an invalid public key"
        case .counterExhausted: return "too many packets under one key"
        case let .badKey(why): return "bad key: \(why)"
        case .untrustedPeer: return "the relay opening a trunk is not in the trusted-relay set"
        case .relayKeyMismatch:
            return "the relay's key is not the one in the invite: refusing to talk (stale invite, or someone is intercepting)"
        }
    }
}
