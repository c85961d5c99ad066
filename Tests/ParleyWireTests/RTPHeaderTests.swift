import Testing
@testable import ParleyWire
import func ParleyRelayTestSupport.bytes

@Suite("RTP header (RFC 3550 §5.1)")
struct RTPHeaderTests {
    @Test func minimalPacketMatchesTheRFCFigureByteForByte() throws {
        // V=2 P=0 X=0 CC=0 | M=1 PT=111 | seq=0x1234 | ts=0xDEADBEEF | ssrc=0x01020304, payload AA BB
        let expected = bytes(fromHex: "80 EF 1234 DEADBEEF 01020304 AABB")
        let header = RTPHeader(marker: true, payloadType: 111, sequenceNumber: 0x1234, timestamp: 0xDEAD_BEEF, ssrc: 0x0102_0304)
        #expect(try header.serialized(payload: [0xAA, 0xBB]) == expected)

        let parsed = try parseRTP(expected)
        #expect(parsed.header == header)
        #expect(parsed.payload == [0xAA, 0xBB])
        #expect(parsed.padding == 0)
    }

    @Test func csrcListAndPaddingAreWrittenAndReadAsTheFigureShows() throws {
        // CC=2, P=1: first byte 1010 0010 = 0xA2; three bytes of padding, the last counting them.
        let expected = bytes(fromHex: "A2 00 0001 00000002 00000003 0000000A 0000000B 55 0000 03")
        let header = RTPHeader(payloadType: 0, sequenceNumber: 1, timestamp: 2, ssrc: 3, csrcs: [10, 11])
        #expect(try header.serialized(payload: [0x55], paddingCount: 3) == expected)

        let parsed = try parseRTP(expected)
        #expect(parsed.header == header)
        #expect(parsed.payload == [0x55])
        #expect(parsed.padding == 3)
    }

    @Test func oneByteExtensionMatchesRFC8285Figure() throws {
        // RFC 8285 §4.2 example: 0xBEDE, length 3 words; ID 1 L=0 (1 byte), ID 2 L=1 (2 bytes),
        // padding, ID 3 L=3 (4 bytes). Written by the serialiser without the mid-block padding.
        let header = RTPHeader(
            payloadType: 111, sequenceNumber: 7, timestamp: 960, ssrc: 0xCAFE_F00D,
            headerExtension: .elements([
                RTPHeaderExtensionElement(id: 1, data: [0x9F]),
                RTPHeaderExtensionElement(id: 2, data: [0x11, 0x22]),
                RTPHeaderExtensionElement(id: 3, data: [0x01, 0x02, 0x03, 0x04]),
            ])
        )
        let expected = bytes(fromHex: "90 6F 0007 000003C0 CAFEF00D  BEDE 0003  10 9F 21 1122 33 01020304 0000")
        #expect(try header.serialized(payload: []) == expected)
        #expect(try parseRTP(expected).header == header)
    }

    @Test func oneByteExtensionSkipsPaddingAndStopsAtID15() throws {
        // ID 1 (1 byte), two padding bytes, ID 15 (stop), then bytes that must be ignored.
        let packet = bytes(fromHex: "90 6F 0000 00000000 00000001  BEDE 0002  10 42 00 00 F0 FF FF FF")
        try packet.withUnsafeBytes { raw in
            let view = try RTPPacketView(parsing: raw)
            let elements = view.headerExtensionElements.map { ($0.id, Array($0.data)) }
            #expect(elements.count == 1)
            #expect(elements.first?.0 == 1)
            #expect(elements.first?.1 == [0x42])
        }
    }

    @Test func twoByteExtensionCarriesLongAndEmptyElements() throws {
        let long = [UInt8](repeating: 0x5A, count: 20)
        let header = RTPHeader(
            payloadType: 96, sequenceNumber: 65_535, timestamp: 0, ssrc: 1,
            headerExtension: .elements([
                RTPHeaderExtensionElement(id: 200, data: long),
                RTPHeaderExtensionElement(id: 5, data: []),
            ], appBits: 0)
        )
        let serialized = try header.serialized(payload: [1, 2, 3])
        // Profile 0x1000, length = (2+20 + 2+0 = 24 bytes) / 4 = 6 words.
        #expect(Array(serialized[12..<16]) == bytes(fromHex: "1000 0006"))
        #expect(Array(serialized[16..<18]) == [200, 20])
        let parsed = try parseRTP(serialized)
        #expect(parsed.header == header)
        #expect(parsed.payload == [1, 2, 3])
    }

    @Test func twoByteFormKeepsItsAppBits() throws {
        let header = RTPHeader(
            payloadType: 96, sequenceNumber: 1, timestamp: 1, ssrc: 1,
            headerExtension: .elements([RTPHeaderExtensionElement(id: 1, data: [7])], appBits: 0x9)
        )
        let serialized = try header.serialized(payload: [])
        #expect(Array(serialized[12..<14]) == bytes(fromHex: "1009"))
        #expect(try parseRTP(serialized).header == header)
    }

    @Test func opaqueExtensionFromAnotherProfileRoundTrips() throws {
        let header = RTPHeader(
            payloadType: 8, sequenceNumber: 2, timestamp: 3, ssrc: 4,
            headerExtension: .opaque(profile: 0xABCD, data: [1, 2, 3, 4, 5, 6, 7, 8])
        )
        let serialized = try header.serialized(payload: [9])
        #expect(Array(serialized[12..<16]) == bytes(fromHex: "ABCD 0002"))
        #expect(try parseRTP(serialized).header == header)
    }

    @Test func audioLevelIsReadInPlaceFromTheExtension() throws {
        // RFC 6464 §3: V=1, level 42 -dBov → 0x80 | 42.
        let level = AudioLevel(voiceActivity: true, level: 42)
        #expect(level.byte == 0xAA)
        let header = RTPHeader(
            payloadType: 111, sequenceNumber: 1, timestamp: 1, ssrc: 1,
            headerExtension: .elements([level.element])
        )
        let serialized = try header.serialized(payload: [0xFC])
        #expect(Array(serialized[12..<20]) == bytes(fromHex: "BEDE 0001 10 AA 0000"))
        let parsedLevel = try serialized.withUnsafeBytes { raw in try RTPPacketView(parsing: raw).audioLevel }
        #expect(parsedLevel == level)
    }

    @Test func audioLevelFromRMS() {
        #expect(AudioLevel(rms: 1.0, voiceActivity: true).level == 0)
        #expect(AudioLevel(rms: 0.1, voiceActivity: true).level == 20)
        #expect(AudioLevel(rms: 0.001, voiceActivity: false).level == 60)
        #expect(AudioLevel(rms: 0, voiceActivity: false).level == 127)
        #expect(AudioLevel(rms: 1e-9, voiceActivity: false).level == 127)
    }

    @Test func malformedPacketsAreRejectedWithTheReason() {
        // Version 1.
        #expect(throws: WireError.malformed(.rtpHeader, reason: "version is not 2")) {
            try parseRTP(bytes(fromHex: "40 00 0000 00000000 00000000"))
        }
        // 11 bytes: truncated fixed header.
        #expect(throws: WireError.truncated(.rtpHeader, needed: 12, available: 11)) {
            try parseRTP(bytes(fromHex: "80 00 0000 00000000 000000"))
        }
        // CC=3 but only one CSRC present.
        #expect(throws: WireError.truncated(.rtpCSRCList, needed: 24, available: 16)) {
            try parseRTP(bytes(fromHex: "83 00 0000 00000000 00000000 00000001"))
        }
        // Extension says 2 words, only 1 present.
        #expect(throws: WireError.truncated(.rtpHeaderExtension, needed: 24, available: 20)) {
            try parseRTP(bytes(fromHex: "90 00 0000 00000000 00000000 BEDE 0002 10 AA 0000"))
        }
        // One-byte element runs past the block: ID 1 with L=3 (4 bytes) but 3 bytes left.
        #expect(throws: WireError.self) {
            try parseRTP(bytes(fromHex: "90 00 0000 00000000 00000000 BEDE 0001 13 AA BB CC"))
        }
        // Padding count larger than the body.
        #expect(throws: WireError.malformed(.rtpPadding, reason: "padding is longer than the packet body")) {
            try parseRTP(bytes(fromHex: "A0 00 0000 00000000 00000000 01 09"))
        }
        // Padding count zero.
        #expect(throws: WireError.malformed(.rtpPadding, reason: "padding count is zero")) {
            try parseRTP(bytes(fromHex: "A0 00 0000 00000000 00000000 01 00"))
        }
    }

    @Test func serialisingIntoATooSmallBufferFailsWithoutWritingPastIt() throws {
        let header = RTPHeader(payloadType: 111, sequenceNumber: 1, timestamp: 1, ssrc: 1)
        var storage = [UInt8](repeating: 0xEE, count: 16)
        let payload: [UInt8] = [1, 2, 3, 4, 5, 6]
        storage.withUnsafeMutableBytes { raw in
            let small = UnsafeMutableRawBufferPointer(rebasing: raw[0..<14])
            _ = payload.withUnsafeBytes { payloadRaw in
                #expect(throws: WireError.outputTooSmall(needed: 18, available: 14)) {
                    try header.serialize(payload: payloadRaw, into: small)
                }
            }
        }
        #expect(storage[14] == 0xEE && storage[15] == 0xEE)
    }

    @Test func headerSizeQueryMatchesWhatIsWritten() throws {
        let header = RTPHeader(
            payloadType: 111, sequenceNumber: 9, timestamp: 9, ssrc: 9, csrcs: [1, 2, 3],
            headerExtension: .elements([AudioLevel(voiceActivity: false, level: 30).element])
        )
        for padding in [0, 1, 4, 255] {
            let bytes = try header.serialized(payload: [UInt8](repeating: 1, count: 37), paddingCount: padding)
            #expect(bytes.count == header.serializedSize(payloadCount: 37, paddingCount: padding))
        }
    }
}
