import ParleyBasics
import ParleyWire
import Testing
@testable import ParleyWebRTC

@Suite("ICE-lite answers")
struct ICELiteTests {
    static let responder = ICELiteResponder(localUsernameFragment: "relay", localPassword: "relaypasswordrelaypassword", remoteUsernameFragment: "brws")

    /// A browser's check, as Chromium builds it (USERNAME, ICE-CONTROLLING, USE-CANDIDATE,
    /// PRIORITY, MESSAGE-INTEGRITY, FINGERPRINT).
    static func request(username: String = "relay:brws", password: String = "relaypasswordrelaypassword", nominate: Bool = true) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 300)
        let authentication = STUNAuthentication(password: password)
        let count = try buffer.withUnsafeMutableBytes { raw in
            var writer = try STUNMessageWriter(type: .bindingRequest, transactionID: STUNTransactionID(high: 1, middle: 2, low: 3), into: raw)
            try writer.appendUsername(username)
            try writer.appendICERole(isControlling: true, tieBreaker: 99)
            if nominate { try writer.appendUseCandidate() }
            try writer.appendPriority(1_853_824_767)
            try writer.appendMessageIntegrity(authentication.sign)
            try writer.appendFingerprint()
            return writer.count
        }
        return Array(buffer.prefix(count))
    }

    func answer(_ request: [UInt8], from source: STUNAddress = .ipv4(0x7F00_0001, port: 40_000)) -> (ICELiteResponder.Outcome, [UInt8]) {
        var output = [UInt8](repeating: 0, count: ICELiteResponder.maximumAnswerSize)
        let outcome = request.withUnsafeBytes { raw -> ICELiteResponder.Outcome in
            guard let message = try? STUNMessageView(parsing: raw) else { return .ignored(.notABindingRequest) }
            return output.withUnsafeMutableBytes { Self.responder.answer(message, from: source, into: $0) }
        }
        if case let .answered(count, _) = outcome { return (outcome, Array(output.prefix(count))) }
        return (outcome, [])
    }

    @Test func theRFCSampleRequestAuthenticatesWithItsPassword() throws {
        let request = Self.rfc5769Request
        try request.withUnsafeBytes { raw in
            let message = try STUNMessageView(parsing: raw)
            #expect(STUNAuthentication(password: "VOkJxbRl1RmTxUk/WvJxBt").isAuthentic(message))
            #expect(!STUNAuthentication(password: "VOkJxbRl1RmTxUk/WvJxBT").isAuthentic(message))
        }
    }

    @Test func anAuthenticCheckIsAnsweredWithTheSourceAddressSignedAndNoLarger() throws {
        let request = try Self.request()
        for source in [STUNAddress.ipv4(0x7F00_0001, port: 40_000), .ipv6(high: 1, low: 2, port: 3)] {
            let (outcome, bytes) = answer(request, from: source)
            #expect(outcome == .answered(count: bytes.count, nominated: true))
            #expect(bytes.count <= request.count)
            try bytes.withUnsafeBytes { raw in
                let response = try STUNMessageView(parsing: raw)
                #expect(response.type == .bindingSuccess)
                #expect(response.transactionID == STUNTransactionID(high: 1, middle: 2, low: 3))
                #expect(response.xorMappedAddress == source)
                #expect(response.hasValidFingerprint)
                #expect(STUNAuthentication(password: "relaypasswordrelaypassword").isAuthentic(response))
            }
        }
    }

    @Test func strangersGetNoAnswer() throws {
        #expect(answer(try Self.request(password: "wrongpasswordwrongpassword")).0 == .ignored(.badIntegrity))
        #expect(answer(try Self.request(username: "other:brws")).0 == .ignored(.unknownUsername))
        #expect(answer(try Self.request(username: "relay:else")).0 == .ignored(.unknownUsername))
        var noFingerprint = try Self.request()
        noFingerprint[noFingerprint.count - 1] ^= 1
        #expect(answer(noFingerprint).0 == .ignored(.badFingerprint))
    }

    /// Random, truncated and bit-flipped checks: none traps, none but the untouched one is
    /// answered, and no answer is ever larger than what came in.
    @Test func hostileRequestsAreNeverAnsweredLargerThanThemselves() throws {
        let valid = try Self.request()
        var random = SplitMix64(seed: 0x4943_454C)
        var answered = 0
        for round in 0..<20_000 {
            var bytes: [UInt8]
            switch round % 3 {
            case 0: bytes = Array(valid.prefix(Int.random(in: 0...valid.count, using: &random)))
            case 1:
                bytes = valid
                bytes[Int.random(in: 0..<bytes.count, using: &random)] ^= 1 << UInt8.random(in: 0...7, using: &random)
            default:
                bytes = (0..<Int.random(in: 20...120, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                bytes[0] = 0; bytes[1] = 1; bytes[4] = 0x21; bytes[5] = 0x12; bytes[6] = 0xA4; bytes[7] = 0x42
                bytes[2] = UInt8((bytes.count - 20) >> 8); bytes[3] = UInt8(truncatingIfNeeded: bytes.count - 20)
            }
            let (outcome, answerBytes) = answer(bytes)
            if case .answered = outcome {
                answered += 1
                #expect(answerBytes.count <= bytes.count)
            }
        }
        #expect(answered <= 2_000, "only untouched copies of the valid check (the truncation to its full length) are answered")
    }

    @Test func theUsernameNamesTheRelaysUfrag() {
        #expect(Array("abcd:efgh".utf8).withUnsafeBytes { ICELiteResponder.localUsernameFragment(of: $0) } == "abcd")
        #expect(Array("ab:efgh".utf8).withUnsafeBytes { ICELiteResponder.localUsernameFragment(of: $0) } == nil)
        #expect(Array("abcdefgh".utf8).withUnsafeBytes { ICELiteResponder.localUsernameFragment(of: $0) } == nil)
    }

    /// RFC 5769 §2.1's sample request (USERNAME "evtj:h6vY", password "VOkJxbRl1RmTxUk/WvJxBt").
    static let rfc5769Request: [UInt8] = [
        0x00, 0x01, 0x00, 0x58, 0x21, 0x12, 0xa4, 0x42, 0xb7, 0xe7, 0xa7, 0x01,
        0xbc, 0x34, 0xd6, 0x86, 0xfa, 0x87, 0xdf, 0xae, 0x80, 0x22, 0x00, 0x10,
        0x53, 0x54, 0x55, 0x4e, 0x20, 0x74, 0x65, 0x73, 0x74, 0x20, 0x63, 0x6c,
        0x69, 0x65, 0x6e, 0x74, 0x00, 0x24, 0x00, 0x04, 0x6e, 0x00, 0x01, 0xff,
        0x80, 0x29, 0x00, 0x08, 0x93, 0x2f, 0xf9, 0xb1, 0x51, 0x26, 0x3b, 0x36,
        0x00, 0x06, 0x00, 0x09, 0x65, 0x76, 0x74, 0x6a, 0x3a, 0x68, 0x36, 0x76,
        0x59, 0x20, 0x20, 0x20, 0x00, 0x08, 0x00, 0x14, 0x9a, 0xea, 0xa7, 0x0c,
        0xbf, 0xd8, 0xcb, 0x56, 0x78, 0x1e, 0xf2, 0xb5, 0xb2, 0xd3, 0xf2, 0x49,
        0xc1, 0xb5, 0x71, 0xa2, 0x80, 0x28, 0x00, 0x04, 0xe5, 0x7a, 0x3b, 0xcf,
    ]
}
