import Crypto

/// Noise_IK_25519_ChaChaPoly_SHA256, for relay-to-relay trunks: both ends prove a static key.
///
/// ```
/// IK:
///   <- s
///   ...
///   -> e, es, s, ss
///   <- e, ee, se
/// ```
///
/// The opening relay (initiator) knows the other relay's static key (the cluster publishes
/// it) and sends its own, encrypted, in message 1; the answering relay (responder) learns it
/// after one Diffie-Hellman (`es`) and can refuse a key it does not trust before spending a
/// second (`ss`). Message 2 proves the responder holds its key and mixes both ephemerals
/// (`ee`, `se`), so the transport keys are forward-secret and bound to both static keys.
///
/// Same primitives and symmetric state as the client's NK (`NoiseHandshake.swift`); checked
/// byte for byte against the Cacophony test vector.
public struct NoiseIKInitiator: Sendable {
    private var state = NoiseSymmetricState(protocolName: Noise.trunkProtocolName)
    private let staticKey: Curve25519.KeyAgreement.PrivateKey
    private let ephemeral: Curve25519.KeyAgreement.PrivateKey
    private let responderStatic: Curve25519.KeyAgreement.PublicKey

    public init(staticKey: Curve25519.KeyAgreement.PrivateKey, responderPublicKey: Curve25519.KeyAgreement.PublicKey, prologue: [UInt8]) {
        self.init(staticKey: staticKey, responderPublicKey: responderPublicKey, prologue: prologue, ephemeral: .init())
    }

    /// With a chosen ephemeral key, for test vectors only.
    init(staticKey: Curve25519.KeyAgreement.PrivateKey, responderPublicKey: Curve25519.KeyAgreement.PublicKey, prologue: [UInt8],
         ephemeral: Curve25519.KeyAgreement.PrivateKey) {
        self.staticKey = staticKey
        self.ephemeral = ephemeral
        self.responderStatic = responderPublicKey
        state.mixHash(prologue)
        state.mixHash(responderPublicKey.rawRepresentation)  // pre-message: <- s
    }

    /// `-> e, es, s, ss` with `payload` encrypted to the responder.
    public mutating func writeMessage1(payload: [UInt8]) throws(SecurityError) -> [UInt8] {
        let e = Array(ephemeral.publicKey.rawRepresentation)
        state.mixHash(e)
        state.mixKey(try Noise.dh(ephemeral, responderStatic))
        let encryptedStatic = state.encryptAndHash(Array(staticKey.publicKey.rawRepresentation))
        state.mixKey(try Noise.dh(staticKey, responderStatic))
        return e + encryptedStatic + state.encryptAndHash(payload)
    }

    /// `<- e, ee, se`: returns the responder's payload and the transport keys.
    public mutating func readMessage2(_ message: some Collection<UInt8>) throws(SecurityError) -> (payload: [UInt8], keys: NoiseTransportKeys) {
        let message = Array(message)
        guard message.count >= Noise.keySize + Noise.tagSize else { throw .malformed("trunk handshake response too short") }
        let re = try Noise.publicKey(message[0..<Noise.keySize])
        state.mixHash(message[0..<Noise.keySize])
        state.mixKey(try Noise.dh(ephemeral, re))
        state.mixKey(try Noise.dh(staticKey, re))
        let payload = try state.decryptAndHash(message[Noise.keySize...])
        let (send, receive) = state.split()
        return (payload, NoiseTransportKeys(sending: send, receiving: receive, handshakeHash: state.handshakeHash))
    }
}

/// The answering relay's side of IK: reads message 1 (refusing an untrusted initiator
/// between its two Diffie-Hellmans), writes message 2.
public struct NoiseIKResponder {
    private var state = NoiseSymmetricState(protocolName: Noise.trunkProtocolName)
    private let staticKey: Curve25519.KeyAgreement.PrivateKey
    private let ephemeral: Curve25519.KeyAgreement.PrivateKey
    private var remoteEphemeral: Curve25519.KeyAgreement.PublicKey?
    private var remoteStatic: Curve25519.KeyAgreement.PublicKey?

    public init(staticKey: Curve25519.KeyAgreement.PrivateKey, prologue: [UInt8]) {
        self.init(staticKey: staticKey, prologue: prologue, ephemeral: .init())
    }

    init(staticKey: Curve25519.KeyAgreement.PrivateKey, prologue: [UInt8], ephemeral: Curve25519.KeyAgreement.PrivateKey) {
        self.staticKey = staticKey
        self.ephemeral = ephemeral
        state.mixHash(prologue)
        state.mixHash(staticKey.publicKey.rawRepresentation)
    }

    /// The initiator's ephemeral public key once message 1 has been read (names the handshake
    /// in the replay cache).
    public var initiatorEphemeral: [UInt8]? { remoteEphemeral.map { Array($0.rawRepresentation) } }

    /// The initiator's static public key once message 1 has been read.
    public var initiatorStatic: Curve25519.KeyAgreement.PublicKey? { remoteStatic }

    /// `-> e, es, s, ss`: returns the initiator's payload. `accepts` sees the initiator's
    /// static key as soon as it is decrypted; false stops here with ``SecurityError/untrustedPeer``,
    /// before the second Diffie-Hellman.
    public mutating func readMessage1(
        _ message: some Collection<UInt8>, accepts: (Curve25519.KeyAgreement.PublicKey) -> Bool
    ) throws(SecurityError) -> [UInt8] {
        let message = Array(message)
        let staticPart = Noise.keySize + Noise.tagSize
        guard message.count >= Noise.keySize + staticPart + Noise.tagSize else { throw .malformed("trunk handshake init too short") }
        let re = try Noise.publicKey(message[0..<Noise.keySize])
        state.mixHash(message[0..<Noise.keySize])
        state.mixKey(try Noise.dh(staticKey, re))
        let rs = try Noise.publicKey(try state.decryptAndHash(message[Noise.keySize..<(Noise.keySize + staticPart)]))
        guard accepts(rs) else { throw .untrustedPeer }
        state.mixKey(try Noise.dh(staticKey, rs))
        let payload = try state.decryptAndHash(message[(Noise.keySize + staticPart)...])
        remoteEphemeral = re
        remoteStatic = rs
        return payload
    }

    /// `<- e, ee, se` with `payload`; returns the message and the transport keys.
    public mutating func writeMessage2(payload: [UInt8]) throws(SecurityError) -> (message: [UInt8], keys: NoiseTransportKeys) {
        guard let remoteEphemeral, let remoteStatic else { throw .malformed("message 2 written before message 1 was read") }
        let e = Array(ephemeral.publicKey.rawRepresentation)
        state.mixHash(e)
        state.mixKey(try Noise.dh(ephemeral, remoteEphemeral))
        state.mixKey(try Noise.dh(ephemeral, remoteStatic))
        let message = e + state.encryptAndHash(payload)
        let (receive, send) = state.split()
        return (message, NoiseTransportKeys(sending: send, receiving: receive, handshakeHash: state.handshakeHash))
    }
}
