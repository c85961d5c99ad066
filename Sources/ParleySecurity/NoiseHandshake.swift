import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Noise_NK_25519_ChaChaPoly_SHA256, from "The Noise Protocol Framework" (revision 34), for
/// a client and its relay; relay-to-relay trunks use IK on the same primitives (`NoiseIK.swift`).
///
/// ```
/// NK:
///   <- s
///   ...
///   -> e, es
///   <- e, ee
/// ```
///
/// The client (initiator) knows the relay's static public key from the invite and pins
/// it; the relay (responder) has no long-term client keys — clients authenticate with
/// their access token, which travels only inside message 1's encrypted payload. Message 1
/// is readable only by the holder of the relay's private key; message 2 proves the relay
/// holds it and gives both sides forward-secret transport keys (`ee`).
///
/// Built only from swift-crypto primitives (X25519, SHA-256, HKDF, ChaCha20-Poly1305);
/// the tests check it byte for byte against the Cacophony test vectors.
enum Noise {
    static let protocolName = "Noise_NK_25519_ChaChaPoly_SHA256"
    static let trunkProtocolName = "Noise_IK_25519_ChaChaPoly_SHA256"
    static let keySize = 32
    static let hashSize = 32
    static let tagSize = 16

    /// Noise's HKDF with two outputs is RFC 5869 HKDF with the chaining key as salt and empty info.
    static func hkdf(chainingKey: [UInt8], inputKeyMaterial: [UInt8]) -> ([UInt8], [UInt8]) {
        let output = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: inputKeyMaterial),
            salt: chainingKey,
            outputByteCount: 2 * hashSize
        )
        let bytes = output.withUnsafeBytes { Array($0) }
        return (Array(bytes[0..<hashSize]), Array(bytes[hashSize...]))
    }

    /// ChaChaPoly's Noise nonce: 32 zero bits, then the 64-bit counter little-endian.
    static func nonce(_ counter: UInt64) -> ChaChaPoly.Nonce {
        var bytes = [UInt8](repeating: 0, count: 12)
        withUnsafeBytes(of: counter.littleEndian) { bytes.replaceSubrange(4..<12, with: $0) }
        return try! ChaChaPoly.Nonce(data: bytes)  // 12 bytes is always a valid nonce
    }

    static func dh(_ privateKey: Curve25519.KeyAgreement.PrivateKey, _ publicKey: Curve25519.KeyAgreement.PublicKey) throws(SecurityError) -> [UInt8] {
        // swift-crypto rejects an all-zero result (a low-order public key) by throwing.
        guard let secret = try? privateKey.sharedSecretFromKeyAgreement(with: publicKey) else {
            throw .invalidPublicKey
        }
        return secret.withUnsafeBytes { Array($0) }
    }

    static func publicKey(_ bytes: some Collection<UInt8>) throws(SecurityError) -> Curve25519.KeyAgreement.PublicKey {
        guard let key = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: Array(bytes)) else {
            throw .malformed("not a 32-byte X25519 public key")
        }
        return key
    }
}

/// Noise's SymmetricState: the chaining key, the handshake hash and the handshake cipher,
/// for any pattern: the protocol name is what binds one pattern's transcripts apart from another's.
struct NoiseSymmetricState: Sendable {
    private(set) var chainingKey: [UInt8]
    private(set) var handshakeHash: [UInt8]
    private var key: SymmetricKey?
    private var nonce: UInt64 = 0

    init(protocolName: String = Noise.protocolName) {
        let name = Array(protocolName.utf8)
        // A name of at most HASHLEN bytes is used directly, zero-padded (§5.2).
        let h = name.count <= Noise.hashSize
            ? name + [UInt8](repeating: 0, count: Noise.hashSize - name.count)
            : Array(SHA256.hash(data: name))
        chainingKey = h
        handshakeHash = h
    }

    mutating func mixHash(_ data: some Collection<UInt8>) {
        var hasher = SHA256()
        hasher.update(data: handshakeHash)
        hasher.update(data: Array(data))
        handshakeHash = Array(hasher.finalize())
    }

    mutating func mixKey(_ inputKeyMaterial: [UInt8]) {
        let (chainingKey, tempKey) = Noise.hkdf(chainingKey: chainingKey, inputKeyMaterial: inputKeyMaterial)
        self.chainingKey = chainingKey
        key = SymmetricKey(data: tempKey)
        nonce = 0
    }

    mutating func encryptAndHash(_ plaintext: [UInt8]) -> [UInt8] {
        guard let key else {
            mixHash(plaintext)
            return plaintext
        }
        let box = try! ChaChaPoly.seal(plaintext, using: key, nonce: Noise.nonce(nonce), authenticating: handshakeHash)
        nonce += 1
        let ciphertext = Array(box.ciphertext) + Array(box.tag)
        mixHash(ciphertext)
        return ciphertext
    }

    mutating func decryptAndHash(_ ciphertext: some Collection<UInt8>) throws(SecurityError) -> [UInt8] {
        let ciphertext = Array(ciphertext)
        guard let key else {
            mixHash(ciphertext)
            return ciphertext
        }
        guard ciphertext.count >= Noise.tagSize else { throw .malformed("handshake payload shorter than its tag") }
        let split = ciphertext.count - Noise.tagSize
        guard let box = try? ChaChaPoly.SealedBox(nonce: Noise.nonce(nonce), ciphertext: ciphertext[..<split], tag: ciphertext[split...]),
              let plaintext = try? ChaChaPoly.open(box, using: key, authenticating: handshakeHash) else {
            throw .authenticationFailed
        }
        nonce += 1
        mixHash(ciphertext)
        return Array(plaintext)
    }

    /// The two transport keys: initiator → responder first.
    func split() -> (initiatorToResponder: SymmetricKey, responderToInitiator: SymmetricKey) {
        let (first, second) = Noise.hkdf(chainingKey: chainingKey, inputKeyMaterial: [])
        return (SymmetricKey(data: first), SymmetricKey(data: second))
    }
}

/// The result of a completed handshake: a key per direction and the handshake hash
/// (a unique name for the session, usable for channel binding).
public struct NoiseTransportKeys: Sendable {
    public let sending: SymmetricKey
    public let receiving: SymmetricKey
    public let handshakeHash: [UInt8]
}

/// The client side of NK: writes message 1, reads message 2.
public struct NoiseNKInitiator {
    private var state = NoiseSymmetricState()
    private let ephemeral: Curve25519.KeyAgreement.PrivateKey
    private let relayStatic: Curve25519.KeyAgreement.PublicKey

    /// - Parameters:
    ///   - relayPublicKey: the pinned key from the invite.
    ///   - prologue: bytes both sides bind into the handshake without sending them encrypted.
    public init(relayPublicKey: Curve25519.KeyAgreement.PublicKey, prologue: [UInt8]) {
        self.init(relayPublicKey: relayPublicKey, prologue: prologue, ephemeral: .init())
    }

    /// With a chosen ephemeral key, for test vectors only.
    init(relayPublicKey: Curve25519.KeyAgreement.PublicKey, prologue: [UInt8], ephemeral: Curve25519.KeyAgreement.PrivateKey) {
        self.ephemeral = ephemeral
        self.relayStatic = relayPublicKey
        state.mixHash(prologue)
        state.mixHash(relayPublicKey.rawRepresentation)  // pre-message: <- s
    }

    /// `-> e, es` with `payload` encrypted to the relay.
    public mutating func writeMessage1(payload: [UInt8]) throws(SecurityError) -> [UInt8] {
        let e = Array(ephemeral.publicKey.rawRepresentation)
        state.mixHash(e)
        state.mixKey(try Noise.dh(ephemeral, relayStatic))
        return e + state.encryptAndHash(payload)
    }

    /// `<- e, ee`: returns the relay's payload and the transport keys.
    public mutating func readMessage2(_ message: some Collection<UInt8>) throws(SecurityError) -> (payload: [UInt8], keys: NoiseTransportKeys) {
        let message = Array(message)
        guard message.count >= Noise.keySize + Noise.tagSize else { throw .malformed("handshake response too short") }
        let re = message[0..<Noise.keySize]
        state.mixHash(re)
        state.mixKey(try Noise.dh(ephemeral, Noise.publicKey(re)))
        let payload = try state.decryptAndHash(message[Noise.keySize...])
        let (send, receive) = state.split()
        return (payload, NoiseTransportKeys(sending: send, receiving: receive, handshakeHash: state.handshakeHash))
    }
}

/// The relay side of NK: reads message 1, writes message 2.
public struct NoiseNKResponder {
    private var state = NoiseSymmetricState()
    private let staticKey: Curve25519.KeyAgreement.PrivateKey
    private let ephemeral: Curve25519.KeyAgreement.PrivateKey
    private var remoteEphemeral: Curve25519.KeyAgreement.PublicKey?

    public init(staticKey: Curve25519.KeyAgreement.PrivateKey, prologue: [UInt8]) {
        self.init(staticKey: staticKey, prologue: prologue, ephemeral: .init())
    }

    init(staticKey: Curve25519.KeyAgreement.PrivateKey, prologue: [UInt8], ephemeral: Curve25519.KeyAgreement.PrivateKey) {
        self.staticKey = staticKey
        self.ephemeral = ephemeral
        state.mixHash(prologue)
        state.mixHash(staticKey.publicKey.rawRepresentation)
    }

    /// The initiator's ephemeral public key, once message 1 has been read: unique per
    /// handshake, so it names the handshake in the relay's replay cache.
    public var initiatorEphemeral: [UInt8]? { remoteEphemeral.map { Array($0.rawRepresentation) } }

    /// `-> e, es`: returns the client's payload; throws if it was not encrypted to this relay.
    public mutating func readMessage1(_ message: some Collection<UInt8>) throws(SecurityError) -> [UInt8] {
        let message = Array(message)
        guard message.count >= Noise.keySize + Noise.tagSize else { throw .malformed("handshake init too short") }
        let re = try Noise.publicKey(message[0..<Noise.keySize])
        state.mixHash(message[0..<Noise.keySize])
        state.mixKey(try Noise.dh(staticKey, re))
        let payload = try state.decryptAndHash(message[Noise.keySize...])
        remoteEphemeral = re
        return payload
    }

    /// `<- e, ee` with `payload`; returns the message and the transport keys.
    public mutating func writeMessage2(payload: [UInt8]) throws(SecurityError) -> (message: [UInt8], keys: NoiseTransportKeys) {
        guard let remoteEphemeral else { throw .malformed("message 2 written before message 1 was read") }
        let e = Array(ephemeral.publicKey.rawRepresentation)
        state.mixHash(e)
        state.mixKey(try Noise.dh(ephemeral, remoteEphemeral))
        let message = e + state.encryptAndHash(payload)
        let (receive, send) = state.split()
        return (message, NoiseTransportKeys(sending: send, receiving: receive, handshakeHash: state.handshakeHash))
    }
}
