@testable import ParleyRelay
import ParleyBasics
import ParleyWire
import Testing

@Suite("Access tokens (HS256 JWT)")
struct AccessTokenTests {
    static let secret = try! TokenSecret(bytes: Array(1...32))
    static let now: Int64 = 1_700_000_100

    /// Made with Python's hmac, hashlib, base64 and json modules, not with this code:
    /// a token any JWT library would mint (header keys in another order, "pub": false).
    static let externallyMinted = "eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZGEiLCJyb29tIjoic3RhbmR1cCIsImlhdCI6MTcwMDAwMDAwMCwiZXhwIjo0MTAyNDQ0ODAwLCJwdWIiOmZhbHNlfQ.8KKSuxdCdlRwhnJSDzhWSWUPfZvbcrMmg2f1KitEl5o"

    @Test func aTokenMintedByAnotherJWTLibraryIsAccepted() throws {
        let token = try AccessToken.verify(Self.externallyMinted, secret: Self.secret, room: "standup", now: Self.now)
        #expect(token == AccessToken(identity: "ada", room: "standup", issuedAt: 1_700_000_000, expiresAt: 4_102_444_800, canPublish: false))
    }

    @Test func mintedTokensVerifyWithTheirClaims() throws {
        let minted = AccessToken(identity: "Zoë 🎧", room: "stand-up.2", issuedAt: Self.now, expiresAt: Self.now + 60, notBefore: Self.now - 5)
        let verified = try AccessToken.verify(minted.signed(with: Self.secret), secret: Self.secret, room: "stand-up.2", now: Self.now)
        #expect(verified == minted)
    }

    @Test func eachFailureHasItsOwnCode() {
        func failure(_ token: String, room: String = "standup", now: Int64 = AccessTokenTests.now) -> ControlMessage.ErrorCode? {
            do { _ = try AccessToken.verify(token, secret: Self.secret, room: room, now: now); return nil } catch { return error.errorCode }
        }
        let good = AccessToken(identity: "ada", room: "standup", issuedAt: Self.now, expiresAt: Self.now + 3600)
        #expect(failure(good.signed(with: Self.secret)) == nil)
        #expect(failure("") == .tokenMalformed)
        #expect(failure("a.b") == .tokenMalformed)
        #expect(failure(good.signed(with: .random())) == .tokenSignatureInvalid)
        #expect(failure(good.signed(with: Self.secret), now: Self.now + 3600 + AccessToken.clockSkewToleranceSeconds) == .tokenExpired)
        // Within the clock-skew tolerance an expired token still works.
        #expect(failure(good.signed(with: Self.secret), now: Self.now + 3600 + 5) == nil)
        var early = good
        early.notBefore = Self.now + 600
        #expect(failure(early.signed(with: Self.secret)) == .tokenNotYetValid)
        #expect(failure(good.signed(with: Self.secret), room: "other") == .tokenWrongRoom)
        var badName = good
        badName.identity = "tab\there"
        #expect(failure(badName.signed(with: Self.secret)) == .tokenIdentityInvalid)
    }

    @Test func algNoneAndOtherAlgorithmsAreRefused() {
        let unsigned = "eyJhbGciOiAibm9uZSIsICJ0eXAiOiAiSldUIn0.eyJzdWIiOiJhZGEiLCJyb29tIjoic3RhbmR1cCIsImlhdCI6MTcwMDAwMDAwMCwiZXhwIjo0MTAyNDQ0ODAwLCJwdWIiOmZhbHNlfQ."
        #expect(throws: AccessToken.Failure.self) { try AccessToken.verify(unsigned, secret: Self.secret, room: "standup", now: Self.now) }
        do {
            _ = try AccessToken.verify(unsigned, secret: Self.secret, room: "standup", now: Self.now)
        } catch {
            #expect(error.errorCode == .tokenMalformed)
            #expect(error.message.contains("HS256"))
        }
    }

    @Test func messagesNeverContainTheTokenOrSecret() {
        let token = AccessToken(identity: "ada", room: "standup", issuedAt: 0, expiresAt: 10).signed(with: Self.secret)
        let signature = String(token.split(separator: ".").last!)
        do {
            _ = try AccessToken.verify(token, secret: Self.secret, room: "standup", now: Self.now)
        } catch {
            #expect(!error.message.contains(signature) && !error.description.contains(signature))
            #expect(!error.description.contains(Self.secret.base64))
        }
        #expect(!"\(Self.secret)".contains(Self.secret.base64))
    }

    /// Any bytes: never a trap, never accepted unless they are the untouched token.
    @Test func verificationSurvivesAnyBytes() {
        var rng = SeededGenerator(seed: 0x70_4B_E7)
        let valid = AccessToken(identity: "ada", room: "standup", issuedAt: Self.now, expiresAt: Self.now + 3600).signed(with: Self.secret)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ {}\"".utf8)
        var accepted = 0
        for round in 0..<20_000 {
            var bytes: [UInt8]
            switch round % 4 {
            case 0: bytes = rng.bytes(count: Int.random(in: 0...300, using: &rng))
            case 1: bytes = (0..<Int.random(in: 0...300, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! }
            case 2: bytes = Array(valid.utf8.prefix(Int.random(in: 0..<valid.utf8.count, using: &rng)))
            default:
                bytes = Array(valid.utf8)
                for _ in 0..<Int.random(in: 1...3, using: &rng) {
                    bytes[Int.random(in: 0..<bytes.count, using: &rng)] = alphabet.randomElement(using: &rng)!
                }
            }
            let text = String(decoding: bytes, as: UTF8.self)
            if (try? AccessToken.verify(text, secret: Self.secret, room: "standup", now: Self.now)) != nil {
                accepted += 1
                #expect(text == valid || text.dropLast(0) == valid, "a changed token verified: \(text)")
            }
        }
        // Mutations that replace a character with itself leave the token valid; nothing else may pass.
        print("20,000 hostile tokens checked; \(accepted) accepted, each byte-identical to the valid token")
    }

    @Test func base64URLRoundTripsAndRefusesForeignCharacters() {
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            #expect(Base64URL.decode(Array(Base64URL.encode(bytes).utf8)) == bytes)
        }
        #expect(Base64URL.decode(Array("ab+/".utf8)) == nil)
        #expect(Base64URL.decode(Array("a".utf8)) == nil)
    }
}
