import Crypto
import Foundation
import Testing
@testable import ParleySecurity
import ParleyWire

@Suite("The secure handshake between a client and the relay")
struct SecureHandshakeTests {
    let relay = RelayHandshake(key: RelayKey())
    let address = Array("127.0.0.1:40000".utf8)
    let join = try! ControlMessage(body: .join(.init(ssrc: 1, room: "room", token: "secret-token-value", software: "t"))).serialized()
    let joined = try! ControlMessage(body: .joined(.init(
        cookie: 9, ssrc: 1, identity: "alice", room: "room", canPublish: true,
        keepaliveIntervalMilliseconds: 5_000, idleTimeoutMilliseconds: 30_000
    ))).serialized()

    func cookieReply(for client: ClientHandshake, at seconds: UInt64 = 1_000, from address: [UInt8]? = nil) throws -> [UInt8] {
        try #require(client.helloBytes.withUnsafeBytes { relay.cookieReply(toHello: $0, address: address ?? self.address, unixSeconds: seconds) })
    }

    @Test func aFullHandshakeGivesBothSidesWorkingSessions() throws {
        let cache = HandshakeReplayCache()
        var client = ClientHandshake(relayPublicKey: relay.key.publicKey)
        let reply = try cookieReply(for: client)
        #expect(reply.count <= client.helloBytes.count, "the cookie reply is no larger than the hello")
        let initBytes = try reply.withUnsafeBytes { try client.makeInit(cookieReply: $0, payload: join) }
        var accepted = try initBytes.withUnsafeBytes { try relay.acceptInit($0, address: address, unixSeconds: 1_000, replayCache: cache) }
        #expect(accepted.payload == join)
        let (response, relaySession) = try accepted.respond(relayIndex: 77, payload: joined, nowNanoseconds: 0)
        #expect(response.count <= initBytes.count, "the relay never answers with more bytes than it received")
        let (payload, clientSession) = try response.withUnsafeBytes { try client.finish(response: $0, nowNanoseconds: 0) }
        #expect(payload == joined)
        #expect(clientSession.remoteIndex == 77 && relaySession.remoteIndex == client.localIndex)
        #expect(clientSession.handshakeHash == relaySession.handshakeHash)
        let ping = try ControlMessage(body: .ping(.init(timestamp: 5))).serialized()
        #expect(try relaySession.open(try clientSession.seal(ping)) == ping)
        #expect(try clientSession.open(try relaySession.seal(ping)) == ping)
    }

    @Test func theTokenNeverAppearsOnTheWire() throws {
        var client = ClientHandshake(relayPublicKey: relay.key.publicKey)
        let reply = try cookieReply(for: client)
        let initBytes = try reply.withUnsafeBytes { try client.makeInit(cookieReply: $0, payload: join) }
        #expect(!initBytes.contains(subsequence: Array("secret-token-value".utf8)))
        #expect(!initBytes.contains(subsequence: Array("room".utf8)))
    }

    @Test func aClientPinningAnotherKeyRefusesBeforeSendingAnything() throws {
        var client = ClientHandshake(relayPublicKey: RelayKey().publicKey)
        let reply = try cookieReply(for: client)
        #expect(throws: SecurityError.relayKeyMismatch(presentedKeyID: relay.key.keyID)) {
            try reply.withUnsafeBytes { try client.makeInit(cookieReply: $0, payload: join) }
        }
    }

    @Test func anImpostorThatLiesAboutItsKeyCannotReadTheJoin() throws {
        // The impostor copies the real relay's key ID into its cookie reply.
        let impostor = RelayHandshake(key: RelayKey())
        var client = ClientHandshake(relayPublicKey: relay.key.publicKey)
        let honestReply = try cookieReply(for: client)
        let initBytes = try honestReply.withUnsafeBytes { try client.makeInit(cookieReply: $0, payload: join) }
        #expect(throws: SecurityError.self) {
            try initBytes.withUnsafeBytes { try impostor.acceptInit($0, address: address, unixSeconds: 1_000, replayCache: HandshakeReplayCache()) }
        }
    }

    @Test func aCapturedInitReplayedLaterIsRefused() throws {
        let cache = HandshakeReplayCache()
        var client = ClientHandshake(relayPublicKey: relay.key.publicKey)
        let reply = try cookieReply(for: client, at: 1_000)
        let initBytes = try reply.withUnsafeBytes { try client.makeInit(cookieReply: $0, payload: join) }
        _ = try initBytes.withUnsafeBytes { try relay.acceptInit($0, address: address, unixSeconds: 1_010, replayCache: cache) }
        // Within the cookie's life the replay cache catches it...
        #expect(throws: SecurityError.replayedHandshake) {
            try initBytes.withUnsafeBytes { try relay.acceptInit($0, address: address, unixSeconds: 1_050, replayCache: cache) }
        }
        // ...and after it the cookie has expired, whatever the cache holds.
        #expect(throws: SecurityError.invalidCookie) {
            try initBytes.withUnsafeBytes { try relay.acceptInit($0, address: address, unixSeconds: 1_200, replayCache: HandshakeReplayCache()) }
        }
    }

    @Test func aCookieIsBoundToTheAddressThatAskedForIt() throws {
        var client = ClientHandshake(relayPublicKey: relay.key.publicKey)
        let reply = try cookieReply(for: client)
        let initBytes = try reply.withUnsafeBytes { try client.makeInit(cookieReply: $0, payload: join) }
        #expect(throws: SecurityError.invalidCookie) {
            try initBytes.withUnsafeBytes {
                try relay.acceptInit($0, address: Array("10.0.0.9:40000".utf8), unixSeconds: 1_000, replayCache: HandshakeReplayCache())
            }
        }
    }

    @Test func changingTheInitHeaderBreaksTheHandshake() throws {
        var client = ClientHandshake(relayPublicKey: relay.key.publicKey)
        let reply = try cookieReply(for: client)
        var initBytes = try reply.withUnsafeBytes { try client.makeInit(cookieReply: $0, payload: join) }
        initBytes[4] ^= 0x01  // the sender index, bound in through the prologue
        #expect(throws: SecurityError.authenticationFailed) {
            try initBytes.withUnsafeBytes { try relay.acceptInit($0, address: address, unixSeconds: 1_000, replayCache: HandshakeReplayCache()) }
        }
    }

    @Test func cookiesLiveOneToTwoMinutes() {
        let minter = AddressCookieMinter()
        let cookie = minter.cookie(for: address, unixSeconds: 600)
        #expect(minter.isValid(cookie, for: address, unixSeconds: 600))
        #expect(minter.isValid(cookie, for: address, unixSeconds: 719))
        #expect(!minter.isValid(cookie, for: address, unixSeconds: 720))
        #expect(!minter.isValid(cookie, for: Array("other".utf8), unixSeconds: 600))
    }

    @Test func theReplayCacheRemembersTwoEpochsAndBoundsEachSource() {
        let cache = HandshakeReplayCache(capacityPerEpoch: 100, capacityPerSource: 2)
        let host = [UInt8]([10, 0, 0, 1])
        #expect(cache.insert([1], source: host, unixSeconds: 0) == .accepted)
        #expect(cache.contains([1], unixSeconds: 30))
        #expect(cache.insert([2], source: host, unixSeconds: 0) == .accepted)
        #expect(cache.insert([3], source: host, unixSeconds: 0) == .sourceOverQuota, "one source's share is spent")
        #expect(cache.insert([3], source: [10, 0, 0, 2], unixSeconds: 0) == .accepted, "another source's is not")
        #expect(cache.insert([1], source: [10, 0, 0, 2], unixSeconds: 60) == .replayed, "still known one epoch later")
        #expect(cache.insert([1], source: host, unixSeconds: 180) == .accepted, "forgotten once its cookie cannot verify")
    }

    @Test func aFullReplayCacheForgetsItsOldestGenerationRatherThanRefuseAJoin() {
        let cache = HandshakeReplayCache(capacityPerEpoch: 3, capacityPerSource: 100)
        for key in 0..<3 { #expect(cache.insert([UInt8(key)], source: [UInt8(key)], unixSeconds: 0) == .accepted) }
        #expect(cache.insert([9], source: [9], unixSeconds: 0) == .accepted, "a fourth admitted join is never refused")
        #expect(cache.contains([0], unixSeconds: 0), "the previous generation is still remembered")
        for key in 10..<13 { #expect(cache.insert([UInt8(key)], source: [UInt8(key)], unixSeconds: 0) == .accepted) }
        #expect(!cache.contains([0], unixSeconds: 0), "two generations on, the oldest is forgotten")
    }

    @Test func relayKeysRoundTripThroughTheirTextForms() throws {
        let key = RelayKey()
        #expect(key.publicKeyText.count == 43)
        #expect(try RelayKey.publicKey(fromText: key.publicKeyText).rawRepresentation == key.publicKey.rawRepresentation)
        #expect(try RelayKey(privateKeyBase64: key.privateKeyBase64).publicKeyText == key.publicKeyText)
        #expect(throws: SecurityError.self) { try RelayKey.publicKey(fromText: "not a key") }
        #expect(throws: SecurityError.self) { try RelayKey(privateKeyBase64: "AAAA") }
        // As pasted: spaces or a tab around it, padding on the public key.
        let text = key.publicKeyText
        #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
        #expect(try RelayKey.publicKey(fromText: " \t\(text)= ").rawRepresentation == key.publicKey.rawRepresentation)
        #expect(try RelayKey(privateKeyBase64: "  \(key.privateKeyBase64)\t").publicKeyText == text)
    }
}
