import Testing
@testable import ParleyWire
import func ParleyRelayTestSupport.bytes

@Suite("Redundant audio payload (RFC 2198)")
struct REDPayloadTests {
    /// RFC 2198 §3's example: one redundant LPC block (PT 7, 14 bytes, 160 samples back)
    /// before a DVI4 primary (PT 5, 84 bytes).
    static let rfcExample: [UInt8] = bytes(fromHex: "87 02800E 05") + [UInt8](repeating: 0x1C, count: 14) + [UInt8](repeating: 0xD4, count: 84)

    @Test func readsTheRFCExample() throws {
        let payload = try OwnedREDPayload(parsing: Self.rfcExample)
        #expect(payload.redundant == [.init(payloadType: 7, timestampOffset: 160, data: [UInt8](repeating: 0x1C, count: 14))])
        #expect(payload.primary == .init(payloadType: 5, timestampOffset: 0, data: [UInt8](repeating: 0xD4, count: 84)))
    }

    @Test func writesTheRFCExampleByteForByte() throws {
        let payload = OwnedREDPayload(
            redundant: [.init(payloadType: 7, timestampOffset: 160, data: [UInt8](repeating: 0x1C, count: 14))],
            primary: .init(payloadType: 5, timestampOffset: 0, data: [UInt8](repeating: 0xD4, count: 84)))
        #expect(try payload.serialized() == Self.rfcExample)
        #expect(payload.serializedSize == Self.rfcExample.count)
    }

    @Test func aPayloadWithOnlyAPrimaryIsOneHeaderByte() throws {
        let payload = try OwnedREDPayload(parsing: [111, 0xAA, 0xBB])
        #expect(payload.redundant.isEmpty)
        #expect(payload.primary.data == [0xAA, 0xBB])
        #expect(payload.primary.payloadType == 111)
    }

    @Test func keepsTheSendersOrderOfRedundantBlocks() throws {
        let payload = OwnedREDPayload(
            redundant: [.init(payloadType: 111, timestampOffset: 1_920, data: [1, 1]),
                        .init(payloadType: 111, timestampOffset: 960, data: [2, 2, 2])],
            primary: .init(payloadType: 111, timestampOffset: 0, data: [3]))
        let serialized = try payload.serialized()
        #expect(serialized == bytes(fromHex: "EF 1E0002 EF 0F0003 6F 0101 020202 03"))
        #expect(try OwnedREDPayload(parsing: serialized) == payload)
    }

    @Test func blocksThatDoNotFitThePayloadAreRejected() {
        // The header promises 14 bytes of redundancy; only 3 follow the primary's header.
        #expect(throws: WireError.truncated(.redPayload, needed: 19, available: 8)) {
            try OwnedREDPayload(parsing: bytes(fromHex: "87 02800E 05 010203"))
        }
        // Headers that never reach the primary's (the last byte still has F set).
        #expect(throws: WireError.truncated(.redPayload, needed: 5, available: 4)) {
            try OwnedREDPayload(parsing: bytes(fromHex: "87 02800E"))
        }
        #expect(throws: WireError.truncated(.redPayload, needed: 1, available: 0)) {
            try OwnedREDPayload(parsing: [])
        }
    }

    @Test func theWriterRefusesWhatTheFormatCannotSay() {
        let long = OwnedREDPayload(
            redundant: [.init(payloadType: 111, timestampOffset: 960, data: [UInt8](repeating: 0, count: 1_024))],
            primary: .init(payloadType: 111, timestampOffset: 0, data: []))
        #expect(throws: WireError.malformed(.redPayload, reason: "redundant block longer than 1023 bytes")) { try long.serialized() }
        let far = OwnedREDPayload(
            redundant: [.init(payloadType: 111, timestampOffset: 0x4000, data: [1])],
            primary: .init(payloadType: 111, timestampOffset: 0, data: []))
        #expect(throws: WireError.malformed(.redPayload, reason: "timestamp offset exceeds 14 bits")) { try far.serialized() }
        let wide = OwnedREDPayload(redundant: [], primary: .init(payloadType: 128, timestampOffset: 0, data: []))
        #expect(throws: WireError.malformed(.redPayload, reason: "payload type exceeds 7 bits")) { try wide.serialized() }
    }

    @Test func theWriterNeedsRoomForTheWholePayload() throws {
        var buffer = [UInt8](repeating: 0, count: 5)
        let data: [UInt8] = [1, 2, 3]
        buffer.withUnsafeMutableBytes { raw in
            data.withUnsafeBytes { bytes in
                var writer = ByteWriter(raw)
                let primary = REDPayload.Block(payloadType: 111, timestampOffset: 0, data: bytes)
                let redundant = [REDPayload.Block(payloadType: 111, timestampOffset: 960, data: bytes)]
                #expect(REDPayload.serializedSize(redundant: redundant, primaryCount: bytes.count) == 11)
                #expect(throws: WireError.outputTooSmall(needed: 8, available: 5)) {
                    try REDPayload.write(redundant: redundant, primary: primary, to: &writer)
                }
            }
        }
    }

    @Test(arguments: [
        // offset, frame samples, primary sequence → derived sequence
        (960, 960, UInt16(100), UInt16?(99)),
        (1_920, 960, 100, 98),
        (2_880, 960, 1, 65_534),  // wraps below zero
        (480, 960, 100, nil),  // half a frame: not a frame of this stream
        (0, 960, 100, nil),  // the primary itself
        (960, 0, 100, nil),  // no frame length known
        (16_383, 1, 5, 5 &- 16_383),  // the largest offset a peer can send
    ])
    func redundantSequenceNumbersComeFromTheOffsetInWholeFrames(offset: Int, frameSamples: Int, primary: UInt16, expected: UInt16?) {
        [UInt8]().withUnsafeBytes { empty in
            let block = REDPayload.Block(payloadType: 111, timestampOffset: UInt16(offset), data: empty)
            #expect(block.sequenceNumber(primarySequence: primary, frameSamples: frameSamples) == expected)
        }
    }
}
