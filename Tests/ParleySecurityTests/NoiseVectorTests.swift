import Crypto
import Foundation
import Testing
@testable import ParleySecurity
import func ParleyRelayTestSupport.bytes

/// The Cacophony test vector for Noise_NK_25519_ChaChaPoly_SHA256 (haskell-cryptography/cacophony,
/// vectors/cacophony.txt): fixed keys, prologue "John Galt", two handshake messages and four
/// transport messages. Matching it byte for byte shows the handshake is Noise NK exactly.
@Suite("Noise NK against the Cacophony test vector")
struct NoiseVectorTests {
    static let prologue = bytes(fromHex: "4a6f686e2047616c74")
    static let initiatorEphemeral = bytes(fromHex: "893e28b9dc6ca8d611ab664754b8ceb7bac5117349a4439a6b0569da977c464a")
    static let responderStaticPublic = bytes(fromHex: "31e0303fd6418d2f8c0e78b91f22e8caed0fbe48656dcf4767e4834f701b8f62")
    static let responderStatic = bytes(fromHex: "4a3acbfdb163dec651dfa3194dece676d437029c62a408b4c5ea9114246e4893")
    static let responderEphemeral = bytes(fromHex: "bbdb4cdbd309f1a1f2e1456967fe288cadd6f712d65dc7b7793d5e63da6b375b")
    static let messages: [(payload: [UInt8], ciphertext: [UInt8])] = [
        (bytes(fromHex: "4c756477696720766f6e204d69736573"),
         bytes(fromHex: "ca35def5ae56cec33dc2036731ab14896bc4c75dbb07a61f879f8e3afa4c79448134d00711fdb390a0d178fa008f6d47d2891e5ea18ae136c3b4c23ac384efb0")),
        (bytes(fromHex: "4d757272617920526f746862617264"),
         bytes(fromHex: "95ebc60d2b1fa672c1f46a8aa265ef51bfe38e7ccb39ec5be34069f1448088438ea16e3701bc0d77744f117bee22451c9afa7f4cdbbcff00c04a8ee0913c88")),
        (bytes(fromHex: "462e20412e20486179656b"), bytes(fromHex: "a62de29ce27cb80245d440d986ed816c156e9d757d7008df2198b0")),
        (bytes(fromHex: "4361726c204d656e676572"), bytes(fromHex: "174a35f11c689f4530d7208618e0564ae12f2f50ba8eb4df5382ff")),
        (bytes(fromHex: "4a65616e2d426170746973746520536179"), bytes(fromHex: "337e475ebb8eae60f91974c4e455a5af38d1d8628d1803b160d60442874b0a1777")),
        (bytes(fromHex: "457567656e2042f6686d20766f6e2042617765726b"), bytes(fromHex: "047e80e060b7bb08b53c5a23dfe9920cae135b9d1dc6302fc475003062723700366346ac9d")),
    ]

    @Test func handshakeAndTransportMessagesMatchTheVector() throws {
        let staticKey = try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: Self.responderStatic)
        #expect(Array(staticKey.publicKey.rawRepresentation) == Self.responderStaticPublic)

        var initiator = NoiseNKInitiator(
            relayPublicKey: staticKey.publicKey, prologue: Self.prologue,
            ephemeral: try .init(rawRepresentation: Self.initiatorEphemeral)
        )
        var responder = NoiseNKResponder(
            staticKey: staticKey, prologue: Self.prologue,
            ephemeral: try .init(rawRepresentation: Self.responderEphemeral)
        )

        let message1 = try initiator.writeMessage1(payload: Self.messages[0].payload)
        #expect(message1 == Self.messages[0].ciphertext)
        #expect(try responder.readMessage1(message1) == Self.messages[0].payload)

        let (message2, responderKeys) = try responder.writeMessage2(payload: Self.messages[1].payload)
        #expect(message2 == Self.messages[1].ciphertext)
        let (payload2, initiatorKeys) = try initiator.readMessage2(message2)
        #expect(payload2 == Self.messages[1].payload)
        #expect(initiatorKeys.handshakeHash == responderKeys.handshakeHash)

        // Transport messages alternate directions; each direction counts its own nonces from 0.
        for (index, message) in Self.messages.dropFirst(2).enumerated() {
            let fromInitiator = index % 2 == 0
            let key = fromInitiator ? initiatorKeys.sending : responderKeys.sending
            let receiveKey = fromInitiator ? responderKeys.receiving : initiatorKeys.receiving
            let box = try ChaChaPoly.seal(message.payload, using: key, nonce: Noise.nonce(UInt64(index / 2)))
            #expect(Array(box.ciphertext) + Array(box.tag) == message.ciphertext, "transport message \(index + 2)")
            let opened = try ChaChaPoly.open(box, using: receiveKey)
            #expect(Array(opened) == message.payload)
        }
    }

    @Test func aResponderWithAnotherKeyCannotReadMessage1() throws {
        var initiator = NoiseNKInitiator(relayPublicKey: Curve25519.KeyAgreement.PrivateKey().publicKey, prologue: [])
        var impostor = NoiseNKResponder(staticKey: Curve25519.KeyAgreement.PrivateKey(), prologue: [])
        let message1 = try initiator.writeMessage1(payload: Array("token".utf8))
        #expect(throws: SecurityError.authenticationFailed) { try impostor.readMessage1(message1) }
    }

    @Test func aDifferentPrologueFailsTheHandshake() throws {
        let relay = Curve25519.KeyAgreement.PrivateKey()
        var initiator = NoiseNKInitiator(relayPublicKey: relay.publicKey, prologue: [1])
        var responder = NoiseNKResponder(staticKey: relay, prologue: [2])
        let message1 = try initiator.writeMessage1(payload: [])
        #expect(throws: SecurityError.authenticationFailed) { try responder.readMessage1(message1) }
    }
}
