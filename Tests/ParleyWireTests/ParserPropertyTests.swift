import Testing
@testable import ParleyWire
import func ParleyRelayTestSupport.bytes

/// Every parser must survive any bytes: random datagrams, every truncation of a valid
/// packet, and valid packets with bits flipped. A parser either returns a value or throws
/// a `WireError` (the typed `throws` guarantees the type); it must never trap. Where a
/// parse succeeds, writing the value back and parsing again must give the same value.
@Suite("Parsers survive hostile bytes")
struct ParserPropertyTests {
    static let randomCases = 10_000

    /// Inputs that matter: pure noise, valid packets cut short, valid packets with flipped bits,
    /// and noise behind a plausible first byte so the parser gets past its first check.
    static func inputs(seed: UInt64, validExamples: [[UInt8]], plausibleFirstBytes: [UInt8]) -> [[UInt8]] {
        var rng = SeededGenerator(seed: seed)
        var inputs: [[UInt8]] = []
        for _ in 0..<randomCases {
            inputs.append(rng.bytes(count: Int.random(in: 0...200, using: &rng)))
        }
        for _ in 0..<randomCases {
            var bytes = rng.bytes(count: Int.random(in: 1...200, using: &rng))
            bytes[0] = plausibleFirstBytes.randomElement(using: &rng)!
            inputs.append(bytes)
        }
        for example in validExamples {
            for length in 0..<example.count { inputs.append(Array(example.prefix(length))) }
        }
        for _ in 0..<randomCases {
            var bytes = validExamples.randomElement(using: &rng)!
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                let index = Int.random(in: 0..<bytes.count, using: &rng)
                bytes[index] ^= 1 << UInt8.random(in: 0...7, using: &rng)
            }
            inputs.append(bytes)
        }
        return inputs
    }

    @Test func rtpParserNeverTrapsAndWhatItAcceptsRoundTrips() throws {
        let examples = try [
            RTPHeader(payloadType: 111, sequenceNumber: 1, timestamp: 2, ssrc: 3).serialized(payload: [1, 2, 3]),
            RTPHeader(marker: true, payloadType: 111, sequenceNumber: 1, timestamp: 2, ssrc: 3, csrcs: [4, 5],
                      headerExtension: .elements([AudioLevel(voiceActivity: true, level: 9).element]))
                .serialized(payload: [9, 9], paddingCount: 4),
            RTPHeader(payloadType: 96, sequenceNumber: 1, timestamp: 2, ssrc: 3,
                      headerExtension: .elements([RTPHeaderExtensionElement(id: 99, data: [1, 2, 3])]))
                .serialized(payload: [7]),
        ]
        var accepted = 0
        for input in Self.inputs(seed: 0x5254_5001, validExamples: examples, plausibleFirstBytes: [0x80, 0x90, 0xA0, 0xB3]) {
            guard let parsed = try? parseRTP(input) else { continue }
            accepted += 1
            let rewritten = try parsed.header.serialized(payload: parsed.payload, paddingCount: parsed.padding)
            let reparsed = try parseRTP(rewritten)
            #expect(reparsed.header == parsed.header, "input \(input)")
            #expect(reparsed.payload == parsed.payload, "input \(input)")
            input.withUnsafeBytes { raw in
                if let view = try? RTPPacketView(parsing: raw) {
                    _ = view.audioLevel
                    #expect(view.payloadRange.upperBound + view.paddingCount == raw.count)
                }
            }
        }
        #expect(accepted > 1_000, "the generator should reach the accepting paths too")
    }

    @Test func rtcpParserNeverTrapsAndWhatItAcceptsRoundTrips() throws {
        let block = RTCPReportBlock(ssrc: 1, fractionLost: 2, cumulativeLost: -3, extendedHighestSequence: 4, jitter: 5)
        let examples = try [
            RTCPCompoundPacket.serialized([
                .senderReport(RTCPSenderReport(ssrc: 1, ntpTimestamp: NTPTimestamp(rawValue: 9), rtpTimestamp: 2, packetCount: 3, octetCount: 4, reportBlocks: [block])),
                .sourceDescription(RTCPSourceDescription(chunks: [.init(source: 1, items: [.cname("x@y")])])),
            ]),
            RTCPCompoundPacket.serialized([
                .receiverReport(RTCPReceiverReport(ssrc: 1, reportBlocks: [block, block])),
                .goodbye(RTCPGoodbye(sources: [1], reason: "done")),
            ]),
            RTCPCompoundPacket.serialized([.genericNACK(RTCPGenericNACK(senderSSRC: 1, mediaSSRC: 2, lost: [5, 6, 30]))]),
        ]
        var accepted = 0
        for input in Self.inputs(seed: 0x5254_4350, validExamples: examples, plausibleFirstBytes: [0x80, 0x81, 0x82, 0xA1]) {
            guard let packets = try? RTCPCompoundPacket.parse(input) else { continue }
            accepted += 1
            // Bodies of unknown types may hold any bytes, so rewriting can fail only on
            // values the writer refuses (never on what the reader produced from a valid
            // layout); when it succeeds, the result reads back the same.
            if let rewritten = try? RTCPCompoundPacket.serialized(packets) {
                #expect(try RTCPCompoundPacket.parse(rewritten) == packets, "input \(input)")
            }
        }
        #expect(accepted > 1_000)
    }

    @Test func opusParserNeverTrapsAndItsFramesLieInsideThePacket() throws {
        let examples: [[UInt8]] = [
            [9 << 3, 1, 2, 3], [9 << 3 | 1, 1, 2], [9 << 3 | 2, 1, 5, 6],
            [31 << 3 | 3, 0x40 | 2, 3, 1, 1, 1, 1, 0, 0, 0], [16 << 3 | 3, 0x80 | 3, 1, 2, 9, 8, 8, 7, 7, 7],
        ]
        var accepted = 0
        for input in Self.inputs(seed: 0x4F50_5553, validExamples: examples, plausibleFirstBytes: [0x4B, 0xFB, 0x4A, 0x49]) {
            guard let packet = try? OpusPacket(parsing: input) else { continue }
            accepted += 1
            #expect(packet.frames.allSatisfy { $0.lowerBound >= 1 && $0.upperBound <= input.count })
            #expect(packet.sampleCount <= OpusPacket.maximumSamples)
            input.withUnsafeBytes { #expect(OpusPacket.sampleCount($0) == packet.sampleCount) }
        }
        #expect(accepted > 1_000)
    }

    @Test func redParserNeverTrapsAndItsBlocksLieInsideThePayload() throws {
        let examples = try [
            REDPayloadTests.rfcExample,
            OwnedREDPayload(
                redundant: [.init(payloadType: 111, timestampOffset: 1_920, data: [UInt8](repeating: 7, count: 40)),
                            .init(payloadType: 111, timestampOffset: 960, data: [UInt8](repeating: 8, count: 30))],
                primary: .init(payloadType: 111, timestampOffset: 0, data: [UInt8](repeating: 9, count: 50))).serialized(),
            [111, 1, 2, 3],
        ]
        var accepted = 0
        for input in Self.inputs(seed: 0x5245_4430, validExamples: examples, plausibleFirstBytes: [0xEF, 0x87, 0x6F, 0x80]) {
            try input.withUnsafeBytes { raw throws in
                guard let view = try? REDPayloadView(parsing: raw) else { return }
                accepted += 1
                var end = 1 + 4 * view.redundantCount
                for block in view {
                    let start = block.data.baseAddress.map { $0 - raw.baseAddress! } ?? end
                    #expect(start == end && block.data.count <= REDPayload.maximumBlockLength)
                    #expect(block.timestampOffset <= REDPayload.maximumTimestampOffset && block.payloadType <= 0x7F)
                    end += block.data.count
                }
                #expect(view.primary.data.count == raw.count - end && view.primary.payloadType <= 0x7F)
                let payload = OwnedREDPayload(view)
                #expect(try payload.serialized() == input, "input \(input)")
            }
        }
        #expect(accepted > 1_000)
    }

    @Test func controlParserNeverTrapsAndWhatItAcceptsRoundTrips() throws {
        let examples = try ControlMessageTests.examples.map { try $0.serialized() }
        var accepted = 0
        for input in Self.inputs(seed: 0x4354_524C, validExamples: examples, plausibleFirstBytes: [0x50]) {
            guard let message = try? ControlMessage(parsing: input) else { continue }
            accepted += 1
            #expect(try ControlMessage(parsing: message.serialized()) == message, "input \(input)")
        }
        #expect(accepted > 1_000)
    }

    /// The room's messages (member state, text) and the roster's state block, behind a valid
    /// header, so that every body gets read: noise, and examples cut short.
    @Test func roomMessagesSurviveAnyBodyAndWhatTheyAcceptRoundTrips() throws {
        var rng = SeededGenerator(seed: 0x524F_4F4D)
        var accepted = 0
        for _ in 0..<Self.randomCases {
            let type = [ControlMessage.MessageType.roster, .memberState, .text].randomElement(using: &rng)!.rawValue
            var body = rng.bytes(count: Int.random(in: 0...80, using: &rng))
            if type == ControlMessage.MessageType.text.rawValue, body.count >= 9, Bool.random(using: &rng) {
                // A sender and text that fit, so the string readers are reached too.
                body[4] = UInt8.random(in: 0...2, using: &rng)
                body[5 + Int(body[4])] = 0
                if body.count > 6 + Int(body[4]) { body[6 + Int(body[4])] = UInt8.random(in: 0...8, using: &rng) }
            }
            let input = [0x50, 0x01, type, 0x01, 0, 0, 0, 9] + body
            guard let message = try? ControlMessage(parsing: input) else { continue }
            accepted += 1
            #expect(try ControlMessage(parsing: message.serialized()) == message, "input \(input)")
        }
        #expect(accepted > 500, "the generator should reach the accepting paths too (\(accepted))")
    }

    @Test func headerExtensionElementsNeverReadPastTheirBlock() throws {
        var rng = SeededGenerator(seed: 0x4558_5431)
        for _ in 0..<Self.randomCases {
            let words = Int.random(in: 0...6, using: &rng)
            let profile: UInt16 = Bool.random(using: &rng) ? 0xBEDE : 0x1000 | UInt16.random(in: 0...15, using: &rng)
            var packet = bytes(fromHex: "90 6F 0001 00000001 00000001")
            packet += [UInt8(profile >> 8), UInt8(profile & 0xFF), 0, UInt8(words)]
            packet += rng.bytes(count: 4 * words + Int.random(in: 0...3, using: &rng))
            packet.withUnsafeBytes { raw in
                guard let view = try? RTPPacketView(parsing: raw), let block = view.extensionData else { return }
                for element in view.headerExtensionElements {
                    let start = element.data.baseAddress.map { $0 - block.baseAddress! } ?? 0
                    #expect(start >= 0 && start + element.data.count <= block.count)
                }
            }
        }
    }

    @Test func secureTransportParsersNeverTrapAndRespectTheirSizes() throws {
        let hello = try [UInt8](serializedSize: HandshakeHello.size) { (w: inout ByteWriter) throws(WireError) in
            try HandshakeHello(nonce: 7).write(to: &w)
        }
        let cookie = try [UInt8](serializedSize: HandshakeCookie.size) { (w: inout ByteWriter) throws(WireError) in
            try HandshakeCookie(nonce: 7, cookie: [UInt8](repeating: 1, count: 16), relayKeyID: [UInt8](repeating: 2, count: 8)).write(to: &w)
        }
        let initHeader = try [UInt8](serializedSize: HandshakeInit.headerSize) { (w: inout ByteWriter) throws(WireError) in
            try HandshakeInit.writeHeader(to: &w, senderIndex: 5, cookie: [UInt8](repeating: 3, count: 16))
        }
        let responseHeader = try [UInt8](serializedSize: HandshakeResponse.headerSize) { (w: inout ByteWriter) throws(WireError) in
            try HandshakeResponse.writeHeader(to: &w, receiverIndex: 5)
        }
        let sealedHeader = try [UInt8](serializedSize: SealedHeader.size) { (w: inout ByteWriter) throws(WireError) in
            try SealedHeader(keyPhase: true, receiverIndex: 9, counter: 1 << 40).write(to: &w)
        }
        let examples = [hello, cookie, initHeader + [UInt8](repeating: 4, count: 80),
                        responseHeader + [UInt8](repeating: 5, count: 60), sealedHeader + [UInt8](repeating: 6, count: 40)]
        var accepted = 0
        for input in Self.inputs(seed: 0x5345_4352, validExamples: examples, plausibleFirstBytes: [0x51, 0x52, 0x53, 0x54, 0x55]) {
            try input.withUnsafeBytes { raw in
                if let value = try? HandshakeHello(parsing: raw) {
                    accepted += 1
                    #expect(raw.count >= HandshakeHello.size)
                    _ = value
                }
                if let value = try? HandshakeCookie(parsing: raw) {
                    accepted += 1
                    #expect(value.cookie.count == 16 && value.relayKeyID.count == 8)
                }
                if let value = try? HandshakeInit(parsing: raw) {
                    accepted += 1
                    #expect(value.header.count == HandshakeInit.headerSize)
                    #expect(value.noiseMessage.count + HandshakeInit.headerSize == raw.count)
                }
                if let value = try? HandshakeResponse(parsing: raw) {
                    accepted += 1
                    #expect(value.noiseMessage.count + HandshakeResponse.headerSize == raw.count)
                }
                if let value = try? SealedHeader(parsing: raw) {
                    accepted += 1
                    #expect(raw.count >= SealedHeader.overhead)
                    let rewritten = try [UInt8](serializedSize: SealedHeader.size) { (w: inout ByteWriter) throws(WireError) in
                        try value.write(to: &w)
                    }
                    #expect(Array(raw.prefix(2)) + [raw[2] & 0x80] + Array(raw[4..<16]) == Array(rewritten.prefix(2)) + [rewritten[2]] + Array(rewritten[4..<16]))
                }
            }
        }
        #expect(accepted > 1_000)
    }

    @Test func inviteParserNeverTraps() throws {
        var rng = SeededGenerator(seed: 0x494E_5654)
        let alphabet = Array("parley:/[]?&=%0123456789abcdefXYZ._-+ ".utf8)
        for _ in 0..<Self.randomCases {
            let body = (0..<Int.random(in: 0...60, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! }
            let text = "parley://" + String(decoding: body, as: UTF8.self)
            if let invite = try? InviteURL(parsing: text) {
                #expect(try InviteURL(parsing: invite.description) == invite, "input \(text)")
            }
        }
    }
}
