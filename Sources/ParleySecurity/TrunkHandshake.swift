import Crypto
import ParleyWire

/// The prologue of trunk handshakes: a trunk init can never pass for a client's, nor the reverse.
let trunkPrologueLabel = Array("parley relay trunk v1".utf8)

/// The opening relay's side of a trunk handshake: hello → cookie → trunk init → trunk
/// response → session, the client's steps with Noise IK instead of NK, so that both relays
/// prove their static keys.
///
/// The hello and cookie are the client's own (`SecureHandshake.swift`): the answering relay
/// spends no Diffie-Hellman and keeps no state until the opener has shown it receives at its
/// address, exactly as for a client.
public struct TrunkOpener: Sendable {
    public let peerPublicKey: Curve25519.KeyAgreement.PublicKey
    /// The index the peer writes in sealed packets to us.
    public let localIndex: UInt32
    public let hello: HandshakeHello
    private let relayKey: RelayKey
    private var initiator: NoiseIKInitiator?

    public init(relayKey: RelayKey, peerPublicKey: Curve25519.KeyAgreement.PublicKey) {
        self.relayKey = relayKey
        self.peerPublicKey = peerPublicKey
        localIndex = UInt32.random(in: 1...UInt32.max)
        hello = HandshakeHello(nonce: UInt64.random(in: 0...UInt64.max))
    }

    public var helloBytes: [UInt8] {
        try! [UInt8](serializedSize: HandshakeHello.size) { (writer: inout ByteWriter) throws(WireError) in
            try hello.write(to: &writer)
        }
    }

    /// Reads the peer's cookie reply and builds the trunk init carrying `payload`.
    /// Throws ``SecurityError/relayKeyMismatch(presentedKeyID:)`` when the peer holds
    /// another key than the one the cluster published for it.
    public mutating func makeInit(cookieReply bytes: UnsafeRawBufferPointer, payload: [UInt8]) throws(SecurityError) -> [UInt8] {
        let reply: HandshakeCookie
        do { reply = try HandshakeCookie(parsing: bytes) } catch { throw .malformed(error.description) }
        guard reply.nonce == hello.nonce else { throw .malformed("cookie reply answers another hello") }
        return try makeInit(cookie: reply, payload: payload)
    }

    /// Builds the trunk init with a cookie the peer gave this relay's address for an earlier
    /// hello: a cookie names the address, not the hello, and lives a minute or two, so one
    /// relay opening many trunks to one peer asks for it once.
    public mutating func makeInit(cookie reply: HandshakeCookie, payload: [UInt8]) throws(SecurityError) -> [UInt8] {
        guard reply.relayKeyID == RelayKey.keyID(of: peerPublicKey) else { throw .relayKeyMismatch(presentedKeyID: reply.relayKeyID) }
        var header = [UInt8]()
        do {
            header = try [UInt8](serializedSize: HandshakeInit.headerSize) { (writer: inout ByteWriter) throws(WireError) in
                try HandshakeInit.writeHeader(to: &writer, senderIndex: localIndex, cookie: reply.cookie, type: .trunkInit)
            }
        } catch { throw .malformed(error.description) }
        var initiator = NoiseIKInitiator(staticKey: relayKey.privateKey, responderPublicKey: peerPublicKey, prologue: trunkPrologueLabel + header)
        let message = try initiator.writeMessage1(payload: payload)
        self.initiator = initiator
        return header + message
    }

    /// Reads the trunk response: the peer's payload and the session.
    public mutating func finish(
        response bytes: UnsafeRawBufferPointer, policy: SecureSession.Policy = .standard, nowNanoseconds: UInt64
    ) throws(SecurityError) -> (payload: [UInt8], session: SecureSession) {
        guard var initiator else { throw .malformed("trunk response before the init was sent") }
        let response: HandshakeResponse
        do { response = try HandshakeResponse(parsing: bytes, type: .trunkResponse) } catch { throw .malformed(error.description) }
        guard response.receiverIndex == localIndex else { throw .malformed("trunk response for another handshake") }
        let (payload, keys) = try initiator.readMessage2(response.noiseMessage)
        guard payload.count >= 4 else { throw .malformed("trunk response payload lacks the peer's index") }
        let peerIndex = UInt32(payload[0]) << 24 | UInt32(payload[1]) << 16 | UInt32(payload[2]) << 8 | UInt32(payload[3])
        self.initiator = nil
        let session = SecureSession(keys: keys, localIndex: localIndex, remoteIndex: peerIndex, policy: policy, nowNanoseconds: nowNanoseconds)
        return (Array(payload[4...]), session)
    }
}

extension RelayHandshake {
    /// Decrypts a trunk init whose cookie checked out (``checkCookie(_:address:unixSeconds:type:)``):
    /// one Diffie-Hellman reveals the opener's static key, and only when `trusts` accepts it
    /// comes the second. Throws ``SecurityError/untrustedPeer`` for a key not trusted.
    public func openTrunk(
        _ message: HandshakeInit, trusts: (Curve25519.KeyAgreement.PublicKey) -> Bool
    ) throws(SecurityError) -> AcceptedTrunkHandshake {
        var responder = NoiseIKResponder(staticKey: key.privateKey, prologue: trunkPrologueLabel + Array(message.header))
        let payload = try responder.readMessage1(message.noiseMessage, accepts: trusts)
        guard let peer = responder.initiatorStatic, let ephemeral = responder.initiatorEphemeral else {
            throw .malformed("trunk init read without a static key")
        }
        return AcceptedTrunkHandshake(peerIndex: message.senderIndex, peerPublicKey: peer, payload: payload, ephemeralKey: ephemeral, responder: responder)
    }
}

/// A trunk init the answering relay accepted: who opened it, what it asked, and what is
/// needed to answer.
public struct AcceptedTrunkHandshake {
    public let peerIndex: UInt32
    public let peerPublicKey: Curve25519.KeyAgreement.PublicKey
    /// The decrypted payload of message 1 (the ``TrunkOpening``).
    public let payload: [UInt8]
    /// Names this handshake; a retransmitted init carries the same key.
    public let ephemeralKey: [UInt8]
    fileprivate var responder: NoiseIKResponder

    /// The response carrying `localIndex` and `payload`, and the session.
    public mutating func respond(
        localIndex: UInt32, payload: [UInt8], policy: SecureSession.Policy = .standard, nowNanoseconds: UInt64
    ) throws(SecurityError) -> (response: [UInt8], session: SecureSession) {
        let indexBytes = withUnsafeBytes(of: localIndex.bigEndian, Array.init)
        let (message, keys) = try responder.writeMessage2(payload: indexBytes + payload)
        var header = [UInt8]()
        do {
            header = try [UInt8](serializedSize: HandshakeResponse.headerSize) { (writer: inout ByteWriter) throws(WireError) in
                try HandshakeResponse.writeHeader(to: &writer, receiverIndex: peerIndex, type: .trunkResponse)
            }
        } catch { throw .malformed(error.description) }
        let session = SecureSession(keys: keys, localIndex: localIndex, remoteIndex: peerIndex, policy: policy, nowNanoseconds: nowNanoseconds)
        return (header + message, session)
    }
}
