import Crypto
import Foundation
import Testing
@testable import ParleySecurity
import ParleyWire
import func ParleyRelayTestSupport.bytes

/// The Cacophony test vector for Noise_IK_25519_ChaChaPoly_SHA256 (haskell-cryptography/cacophony,
/// vectors/cacophony.txt): the trunk handshake's Noise pattern, byte for byte.
@Suite("Noise IK against the Cacophony test vector")
struct NoiseIKVectorTests {
    static let prologue = bytes(fromHex: "4a6f686e2047616c74")
    static let initiatorStatic = bytes(fromHex: "e61ef9919cde45dd5f82166404bd08e38bceb5dfdfded0a34c8df7ed542214d1")
    static let initiatorEphemeral = bytes(fromHex: "893e28b9dc6ca8d611ab664754b8ceb7bac5117349a4439a6b0569da977c464a")
    static let responderStatic = bytes(fromHex: "4a3acbfdb163dec651dfa3194dece676d437029c62a408b4c5ea9114246e4893")
    static let responderEphemeral = bytes(fromHex: "bbdb4cdbd309f1a1f2e1456967fe288cadd6f712d65dc7b7793d5e63da6b375b")
    static let handshakeHash = bytes(fromHex: "0b0f68fb0c27e03ce9b97565995ed4838cc0581b762ef72b062f6a546419fad7")
    static let messages: [(payload: [UInt8], ciphertext: [UInt8])] = [
        (bytes(fromHex: "4c756477696720766f6e204d69736573"),
         bytes(fromHex: "ca35def5ae56cec33dc2036731ab14896bc4c75dbb07a61f879f8e3afa4c7944718da798efbcd91528520204f904b9bd6c7413dccdc214d951e15253e39987f18146e8cd0873654207148333479d4d16c289f0294b29960a72f48e0b7bba2e89083169825e59642148d492020664ccf7")),
        (bytes(fromHex: "4d757272617920526f746862617264"),
         bytes(fromHex: "95ebc60d2b1fa672c1f46a8aa265ef51bfe38e7ccb39ec5be34069f1448088435361e70b2ed446e6c9ec387d1d6b3b840f194e373979d241b203c4acafccf5")),
        (bytes(fromHex: "462e20412e20486179656b"), bytes(fromHex: "050e9f3c8fac16b68dbce8f8c4bfbf6617c897f9ada4aa29aa19c8")),
        (bytes(fromHex: "4361726c204d656e676572"), bytes(fromHex: "344233a6cabb7141d80f3da2fedc311d9646bbb0f505afe403a667")),
    ]

    @Test func handshakeAndTransportMessagesMatchTheVector() throws {
        let initiatorKey = try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: Self.initiatorStatic)
        let responderKey = try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: Self.responderStatic)
        var initiator = NoiseIKInitiator(
            staticKey: initiatorKey, responderPublicKey: responderKey.publicKey, prologue: Self.prologue,
            ephemeral: try .init(rawRepresentation: Self.initiatorEphemeral))
        var responder = NoiseIKResponder(staticKey: responderKey, prologue: Self.prologue, ephemeral: try .init(rawRepresentation: Self.responderEphemeral))

        let message1 = try initiator.writeMessage1(payload: Self.messages[0].payload)
        #expect(message1 == Self.messages[0].ciphertext)
        var seenKey: [UInt8]?
        #expect(try responder.readMessage1(message1, accepts: { seenKey = Array($0.rawRepresentation); return true }) == Self.messages[0].payload)
        #expect(seenKey == Array(initiatorKey.publicKey.rawRepresentation), "the responder learns the initiator's static key")

        let (message2, responderKeys) = try responder.writeMessage2(payload: Self.messages[1].payload)
        #expect(message2 == Self.messages[1].ciphertext)
        let (payload2, initiatorKeys) = try initiator.readMessage2(message2)
        #expect(payload2 == Self.messages[1].payload)
        #expect(initiatorKeys.handshakeHash == Self.handshakeHash && responderKeys.handshakeHash == Self.handshakeHash)

        for (index, message) in Self.messages.dropFirst(2).enumerated() {
            let fromInitiator = index % 2 == 0
            let key = fromInitiator ? initiatorKeys.sending : responderKeys.sending
            let box = try ChaChaPoly.seal(message.payload, using: key, nonce: Noise.nonce(UInt64(index / 2)))
            #expect(Array(box.ciphertext) + Array(box.tag) == message.ciphertext, "transport message \(index + 2)")
        }
    }
}

@Suite("The trunk handshake between two relays")
struct TrunkHandshakeTests {
    let opener = RelayKey()
    let answerer = RelayHandshake(key: RelayKey())
    let address = Array("127.0.0.2:7800".utf8)
    let opening = try! TrunkOpening(room: "standup").serialized()

    func initBytes(_ trunk: inout TrunkOpener) throws -> [UInt8] {
        let reply = try #require(trunk.helloBytes.withUnsafeBytes { answerer.cookieReply(toHello: $0, address: address, unixSeconds: 1_000) })
        return try reply.withUnsafeBytes { try trunk.makeInit(cookieReply: $0, payload: opening) }
    }

    func open(_ bytes: [UInt8], trusting keys: [Curve25519.KeyAgreement.PublicKey]) throws -> AcceptedTrunkHandshake {
        let trusted = Set(keys.map { Array($0.rawRepresentation) })
        return try bytes.withUnsafeBytes { raw in
            let message = try answerer.checkCookie(raw, address: address, unixSeconds: 1_000, type: .trunkInit)
            return try answerer.openTrunk(message, trusts: { trusted.contains(Array($0.rawRepresentation)) })
        }
    }

    @Test func trustedRelaysAgreeOnSessionsAndEachLearnsTheOthersKey() throws {
        var trunk = TrunkOpener(relayKey: opener, peerPublicKey: answerer.key.publicKey)
        let initBytes = try initBytes(&trunk)
        #expect(initBytes.first == SecureMessageType.trunkInit.rawValue)
        var accepted = try open(initBytes, trusting: [opener.publicKey])
        #expect(accepted.payload == opening)
        #expect(Array(accepted.peerPublicKey.rawRepresentation) == Array(opener.publicKey.rawRepresentation))
        let ack = try ControlMessage(body: .ack(.init(sequence: 0))).serialized()
        let (response, answererSession) = try accepted.respond(localIndex: 42, payload: ack, nowNanoseconds: 0)
        #expect(response.count <= initBytes.count, "the answer is never larger than the init")
        let (payload, openerSession) = try response.withUnsafeBytes { try trunk.finish(response: $0, nowNanoseconds: 0) }
        #expect(payload == ack)
        #expect(openerSession.remoteIndex == 42 && answererSession.remoteIndex == trunk.localIndex)
        let rtp: [UInt8] = [0x80, 111, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9, 1, 2, 3]
        #expect(try answererSession.open(try openerSession.seal(rtp)) == rtp)
        #expect(try openerSession.open(try answererSession.seal(rtp)) == rtp)
    }

    @Test func aRelayNotInTheTrustedSetIsRefusedBeforeTheSecondDiffieHellman() throws {
        var trunk = TrunkOpener(relayKey: opener, peerPublicKey: answerer.key.publicKey)
        let initBytes = try initBytes(&trunk)
        #expect(throws: SecurityError.untrustedPeer) { try open(initBytes, trusting: [RelayKey().publicKey]) }
        #expect(throws: SecurityError.untrustedPeer) { try open(initBytes, trusting: []) }
    }

    @Test func aClientInitIsNotATrunkInitNorTheReverse() throws {
        var trunk = TrunkOpener(relayKey: opener, peerPublicKey: answerer.key.publicKey)
        let initBytes = try initBytes(&trunk)
        #expect(throws: SecurityError.self) {
            try initBytes.withUnsafeBytes { try answerer.acceptInit($0, address: address, unixSeconds: 1_000, replayCache: HandshakeReplayCache()) }
        }
        // Relabelled as a trunk init, a client's init fails the IK reading (other prologue, other pattern).
        var client = ClientHandshake(relayPublicKey: answerer.key.publicKey)
        let reply = try #require(client.helloBytes.withUnsafeBytes { answerer.cookieReply(toHello: $0, address: address, unixSeconds: 1_000) })
        var clientInit = try reply.withUnsafeBytes { try client.makeInit(cookieReply: $0, payload: [UInt8](repeating: 7, count: 80)) }
        clientInit[0] = SecureMessageType.trunkInit.rawValue
        #expect(throws: SecurityError.self) { try open(clientInit, trusting: [opener.publicKey]) }
    }

    @Test func anOpenerExpectingAnotherKeyStopsAtTheCookie() throws {
        var trunk = TrunkOpener(relayKey: opener, peerPublicKey: RelayKey().publicKey)
        #expect(throws: SecurityError.relayKeyMismatch(presentedKeyID: answerer.key.keyID)) { _ = try initBytes(&trunk) }
    }

    @Test func aTamperedInitOrAForgedCookieIsRefused() throws {
        var trunk = TrunkOpener(relayKey: opener, peerPublicKey: answerer.key.publicKey)
        var initBytes = try initBytes(&trunk)
        var forged = initBytes
        forged[10] ^= 1  // the cookie
        #expect(throws: SecurityError.invalidCookie) { try open(forged, trusting: [opener.publicKey]) }
        initBytes[initBytes.count - 1] ^= 1
        #expect(throws: SecurityError.authenticationFailed) { try open(initBytes, trusting: [opener.publicKey]) }
    }
}
