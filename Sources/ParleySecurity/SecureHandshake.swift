import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import ParleyWire

/// The prologue every Parley handshake binds in, followed by the init's clear header.
let handshakePrologueLabel = Array("parley secure transport v1".utf8)

/// The client's side of the handshake: hello → cookie → init → response → session.
///
/// The client pins the relay's public key (from the invite). If the relay presents another
/// key in its cookie reply the client stops with ``SecurityError/relayKeyMismatch(presentedKeyID:)``
/// before sending anything secret; an impostor that lies about its key ID cannot read the
/// init, which is encrypted to the pinned key.
public struct ClientHandshake {
    public let relayPublicKey: Curve25519.KeyAgreement.PublicKey
    /// The index the relay will write in packets to this client.
    public let localIndex: UInt32
    public let hello: HandshakeHello
    private var initiator: NoiseNKInitiator?

    public init(relayPublicKey: Curve25519.KeyAgreement.PublicKey) {
        self.relayPublicKey = relayPublicKey
        self.localIndex = UInt32.random(in: 1...UInt32.max)
        self.hello = HandshakeHello(nonce: UInt64.random(in: 0...UInt64.max))
    }

    public var helloBytes: [UInt8] {
        try! [UInt8](serializedSize: HandshakeHello.size) { (writer: inout ByteWriter) throws(WireError) in
            try hello.write(to: &writer)
        }
    }

    /// Reads the cookie reply and builds the init carrying `payload` (the serialised join).
    public mutating func makeInit(cookieReply bytes: UnsafeRawBufferPointer, payload: [UInt8]) throws(SecurityError) -> [UInt8] {
        let reply: HandshakeCookie
        do { reply = try HandshakeCookie(parsing: bytes) } catch { throw .malformed(error.description) }
        guard reply.nonce == hello.nonce else { throw .malformed("cookie reply answers another hello") }
        guard reply.relayKeyID == RelayKey.keyID(of: relayPublicKey) else {
            throw .relayKeyMismatch(presentedKeyID: reply.relayKeyID)
        }
        var header = [UInt8]()
        do {
            header = try [UInt8](serializedSize: HandshakeInit.headerSize) { (writer: inout ByteWriter) throws(WireError) in
                try HandshakeInit.writeHeader(to: &writer, senderIndex: localIndex, cookie: reply.cookie)
            }
        } catch { throw .malformed(error.description) }
        var initiator = NoiseNKInitiator(relayPublicKey: relayPublicKey, prologue: handshakePrologueLabel + header)
        let message = try initiator.writeMessage1(payload: payload)
        self.initiator = initiator
        return header + message
    }

    /// Reads the relay's response: returns the relay's payload (the joined reply) and the session.
    public mutating func finish(
        response bytes: UnsafeRawBufferPointer, policy: SecureSession.Policy = .standard, nowNanoseconds: UInt64
    ) throws(SecurityError) -> (payload: [UInt8], session: SecureSession) {
        guard var initiator else { throw .malformed("response before the init was sent") }
        let response: HandshakeResponse
        do { response = try HandshakeResponse(parsing: bytes) } catch { throw .malformed(error.description) }
        guard response.receiverIndex == localIndex else { throw .malformed("response for another handshake") }
        let (payload, keys) = try initiator.readMessage2(response.noiseMessage)
        guard payload.count >= 4 else { throw .malformed("response payload lacks the relay's index") }
        let relayIndex = UInt32(payload[0]) << 24 | UInt32(payload[1]) << 16 | UInt32(payload[2]) << 8 | UInt32(payload[3])
        self.initiator = nil
        let session = SecureSession(keys: keys, localIndex: localIndex, remoteIndex: relayIndex, policy: policy, nowNanoseconds: nowNanoseconds)
        return (Array(payload[4...]), session)
    }
}

/// The relay's side of the handshake. Stateless apart from the replay cache it is given,
/// and `Sendable`, so every event loop can share one.
///
/// It answers a hello with a cookie no larger than the hello, and an init only when the
/// cookie matches the sender's address, the init decrypts under the relay's key, and its
/// ephemeral key has not been seen: everything else is dropped without a word.
public struct RelayHandshake: Sendable {
    public let key: RelayKey
    public let cookies: AddressCookieMinter

    public init(key: RelayKey, cookies: AddressCookieMinter = AddressCookieMinter()) {
        self.key = key
        self.cookies = cookies
    }

    /// The cookie reply for a hello from `address`, or nil when the bytes are not a hello.
    public func cookieReply(toHello bytes: UnsafeRawBufferPointer, address: [UInt8], unixSeconds: UInt64) -> [UInt8]? {
        guard let hello = try? HandshakeHello(parsing: bytes) else { return nil }
        let reply = HandshakeCookie(nonce: hello.nonce, cookie: cookies.cookie(for: address, unixSeconds: unixSeconds), relayKeyID: key.keyID)
        return try? [UInt8](serializedSize: HandshakeCookie.size) { (writer: inout ByteWriter) throws(WireError) in
            try reply.write(to: &writer)
        }
    }

    /// Parses an init from `address` and checks its cookie: two HMACs at most, no
    /// Diffie-Hellman and no state, so a flood of inits without a valid cookie costs the
    /// relay almost nothing and none of its shared budgets.
    /// `type`: a client's init, or a relay's trunk init (``openTrunk(_:trusts:)``).
    public func checkCookie(
        _ bytes: UnsafeRawBufferPointer, address: [UInt8], unixSeconds: UInt64, type: SecureMessageType = .handshakeInit
    ) throws(SecurityError) -> HandshakeInit {
        let message: HandshakeInit
        do { message = try HandshakeInit(parsing: bytes, type: type) } catch { throw .malformed(error.description) }
        guard cookies.isValid(message.cookie, for: address, unixSeconds: unixSeconds) else { throw .invalidCookie }
        return message
    }

    /// Decrypts an init whose cookie checked out: one Diffie-Hellman. Throws unless it was
    /// encrypted to this relay's key.
    public func open(_ message: HandshakeInit) throws(SecurityError) -> AcceptedHandshake {
        var responder = NoiseNKResponder(staticKey: key.privateKey, prologue: handshakePrologueLabel + Array(message.header))
        let payload = try responder.readMessage1(message.noiseMessage)
        let ephemeral = responder.initiatorEphemeral ?? []
        return AcceptedHandshake(clientIndex: message.senderIndex, payload: payload, ephemeralKey: ephemeral, responder: responder)
    }

    /// Checks, decrypts and records an init in one step, refusing one seen before: for a
    /// relay that admits every join that decrypts (the tests' scripted relay). The relay
    /// itself records a handshake only once its join has verified.
    public func acceptInit(
        _ bytes: UnsafeRawBufferPointer, address: [UInt8], unixSeconds: UInt64, replayCache: HandshakeReplayCache
    ) throws(SecurityError) -> AcceptedHandshake {
        let accepted = try open(checkCookie(bytes, address: address, unixSeconds: unixSeconds))
        switch replayCache.insert(accepted.ephemeralKey, source: address, unixSeconds: unixSeconds) {
        case .accepted: return accepted
        case .replayed, .sourceOverQuota: throw .replayedHandshake
        }
    }
}

/// An init the relay accepted: the client's payload (its join) and what is needed to answer.
public struct AcceptedHandshake {
    public let clientIndex: UInt32
    /// The decrypted payload of message 1: the client's serialised join.
    public let payload: [UInt8]
    /// Names this handshake; a retransmitted init carries the same key.
    public let ephemeralKey: [UInt8]
    fileprivate var responder: NoiseNKResponder

    /// Builds the response carrying `relayIndex` and `payload` (the serialised joined reply)
    /// and the session; the response is never larger than a valid init.
    public mutating func respond(
        relayIndex: UInt32, payload: [UInt8], policy: SecureSession.Policy = .standard, nowNanoseconds: UInt64
    ) throws(SecurityError) -> (response: [UInt8], session: SecureSession) {
        var indexBytes = [UInt8](repeating: 0, count: 4)
        withUnsafeBytes(of: relayIndex.bigEndian) { indexBytes = Array($0) }
        let (message, keys) = try responder.writeMessage2(payload: indexBytes + payload)
        var header = [UInt8]()
        do {
            header = try [UInt8](serializedSize: HandshakeResponse.headerSize) { (writer: inout ByteWriter) throws(WireError) in
                try HandshakeResponse.writeHeader(to: &writer, receiverIndex: clientIndex)
            }
        } catch { throw .malformed(error.description) }
        let session = SecureSession(keys: keys, localIndex: relayIndex, remoteIndex: clientIndex, policy: policy, nowNanoseconds: nowNanoseconds)
        return (header + message, session)
    }
}
