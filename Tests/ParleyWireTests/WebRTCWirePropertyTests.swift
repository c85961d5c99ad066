import Testing
@testable import ParleyWire

/// The parsers a browser's traffic reaches (STUN, DTLS record headers, SDP) survive any
/// bytes, like every other parser (`ParserPropertyTests`): random datagrams, valid ones cut
/// short and with bits flipped. What they accept reads back the same once written.
@Suite("WebRTC parsers survive hostile bytes")
struct WebRTCWirePropertyTests {
    static func request() throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 200)
        let count = try buffer.withUnsafeMutableBytes { raw in
            var writer = try STUNMessageWriter(type: .bindingRequest, transactionID: STUNTransactionID(high: 9, middle: 8, low: 7), into: raw)
            try writer.appendUsername("abcd:efgh")
            try writer.appendPriority(0x6E00_01FF)
            try writer.appendICERole(isControlling: true, tieBreaker: 42)
            try writer.appendUseCandidate()
            try writer.appendMessageIntegrity { _, output in output.copyBytes(from: repeatElement(7, count: 20)) }
            try writer.appendFingerprint()
            return writer.count
        }
        return Array(buffer.prefix(count))
    }

    @Test func stunParserNeverTrapsAndKeepsEveryPieceInsideTheMessage() throws {
        let examples = try [Self.request(), STUNTests.sampleRequest, STUNTests.sampleIPv4Response, STUNTests.sampleIPv6Response]
        var accepted = 0
        for input in ParserPropertyTests.inputs(seed: 0x5354_554E, validExamples: examples, plausibleFirstBytes: [0x00, 0x01]) {
            input.withUnsafeBytes { raw in
                guard let message = try? STUNMessageView(parsing: raw) else { return }
                accepted += 1
                #expect(raw.count == STUNMessageView.headerSize + Int(raw[2]) << 8 + Int(raw[3]))
                if let integrity = message.integrity {
                    #expect(integrity.offset + 24 <= raw.count)
                    #expect(message.withIntegrityInput { $0.count + $1.count } == integrity.offset)
                }
                if let fingerprint = message.fingerprint { #expect(fingerprint.offset + 8 == raw.count) }
                _ = message.hasValidFingerprint
                if let username = message.username { #expect(username.count <= STUNAttribute.maximumUsernameSize) }
            }
        }
        #expect(accepted > 100, "the generator should reach the accepting paths too")
    }

    @Test func dtlsRecordWalkNeverTrapsAndTilesWhatItAccepts() {
        let hello: [UInt8] = [22, 0xFE, 0xFD, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12] + [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        let data: [UInt8] = [23, 0xFE, 0xFD, 0, 1, 0, 0, 0, 0, 0, 5, 0, 3, 1, 2, 3]
        var accepted = 0
        for input in ParserPropertyTests.inputs(seed: 0x4454_4C53, validExamples: [hello, data, hello + data], plausibleFirstBytes: [20, 21, 22, 23]) {
            input.withUnsafeBytes { raw in
                _ = DTLSRecordHeader.startsHandshake(raw)
                guard let records = DTLSRecordHeader.records(in: raw) else { return }
                accepted += 1
                #expect(records >= 1 && records * DTLSRecordHeader.size <= raw.count)
            }
        }
        #expect(accepted > 100)
    }

    @Test func sdpParserNeverTrapsAndWhatItAcceptsRoundTrips() throws {
        var rng = SeededGenerator(seed: 0x5344_5030)
        let lines = SessionDescriptionTests.chromiumOffer.split(separator: "\r\n").map(String.init)
        let alphabet = Array("vosmcta=:/ -0123456789abcdefABCDEF\r\n\t\u{1}\u{7F}é".unicodeScalars)
        var accepted = 0
        for round in 0..<3_000 {
            var text: String
            switch round % 3 {
            case 0:
                // Lines of the offer, some dropped, duplicated or reordered.
                var picked = lines.filter { _ in Int.random(in: 0..<10, using: &rng) > 0 }
                if picked.count > 2, Bool.random(using: &rng) { picked.swapAt(1, Int.random(in: 1..<picked.count, using: &rng)) }
                text = picked.joined(separator: "\r\n")
            case 1:
                // The offer cut anywhere.
                let whole = SessionDescriptionTests.chromiumOffer
                text = String(whole.prefix(Int.random(in: 0...whole.count, using: &rng)))
            default:
                // Noise after a plausible start.
                text = "v=0\r\no=- 1 1 IN IP4 x\r\n" + String(String.UnicodeScalarView((0..<Int.random(in: 0...300, using: &rng)).map { _ in
                    alphabet.randomElement(using: &rng)!
                }))
            }
            guard let description = try? SessionDescription(parsing: text) else { continue }
            accepted += 1
            for section in description.media {
                _ = (section.rtpMaps, section.headerExtensions, section.fingerprints, section.ssrcs, section.iceUsernameFragment,
                     section.icePassword, section.setup, section.direction)
            }
            #expect(try SessionDescription(parsing: description.text) == description, "input \(text.debugDescription)")
        }
        #expect(accepted > 500)
        var random = SeededGenerator(seed: 0x5344_5031)
        for _ in 0..<ParserPropertyTests.randomCases {
            let bytes = random.bytes(count: Int.random(in: 0...300, using: &random))
            _ = bytes.withUnsafeBytes { try? SessionDescription(parsing: $0) }
        }
    }
}
