import Testing
@testable import ParleyWire

@Suite("Opus TOC and framing (RFC 6716 §3.1–3.2)")
struct OpusPacketTests {
    @Test(arguments: [
        // config, mode, bandwidth, samples per frame (Table 2 of RFC 6716)
        (0, OpusTOC.Mode.silk, OpusTOC.Bandwidth.narrowband, 480),
        (1, .silk, .narrowband, 960),
        (7, .silk, .mediumband, 2880),
        (9, .silk, .wideband, 960),
        (12, .hybrid, .superWideband, 480),
        (15, .hybrid, .fullband, 960),
        (16, .celt, .narrowband, 120),
        (21, .celt, .wideband, 240),
        (26, .celt, .superWideband, 480),
        (31, .celt, .fullband, 960),
    ])
    func tocFollowsTable2(config: Int, mode: OpusTOC.Mode, bandwidth: OpusTOC.Bandwidth, samples: Int) {
        let toc = OpusTOC(UInt8(config << 3) | 0x04 | 0x01)
        #expect(toc.mode == mode)
        #expect(toc.bandwidth == bandwidth)
        #expect(toc.samplesPerFrame == samples)
        #expect(toc.isStereo)
        #expect(toc.frameCountCode == 1)
    }

    @Test func code0IsOneFrame() throws {
        // config 9 (SILK WB 20 ms), mono, code 0.
        let packet = try OpusPacket(parsing: [9 << 3, 1, 2, 3])
        #expect(packet.frames == [1..<4])
        #expect(packet.sampleCount == 960)
    }

    @Test func code1SplitsEvenlyAndRejectsOddLengths() throws {
        let packet = try OpusPacket(parsing: [9 << 3 | 1, 1, 2, 3, 4])
        #expect(packet.frames == [1..<3, 3..<5])
        #expect(packet.sampleCount == 1920)
        #expect(throws: WireError.malformed(.opusPacket, reason: "code 1 packet has an odd number of frame bytes")) {
            try OpusPacket(parsing: [9 << 3 | 1, 1, 2, 3])
        }
    }

    @Test func code2ReadsOneAndTwoByteLengths() throws {
        let short = try OpusPacket(parsing: [9 << 3 | 2, 2, 0xA, 0xB, 0xC])
        #expect(short.frames == [2..<4, 4..<5])
        // 252 + 4 × 1 = 256-byte first frame, then a 3-byte second.
        let long = try OpusPacket(parsing: [9 << 3 | 2, 252, 1] + [UInt8](repeating: 7, count: 259))
        #expect(long.frames == [3..<259, 259..<262])
        #expect(throws: WireError.malformed(.opusPacket, reason: "code 2 first frame is longer than the packet")) {
            try OpusPacket(parsing: [9 << 3 | 2, 5, 1, 2])
        }
    }

    @Test func code3CBRWithPadding() throws {
        // CBR, padding, 3 frames; padding 255 then 1 → 254 + 1 = 255 bytes.
        let body = [UInt8](repeating: 1, count: 6) + [UInt8](repeating: 0, count: 255)
        let packet = try OpusPacket(parsing: [31 << 3 | 3, 0x40 | 3, 255, 1] + body)
        #expect(packet.frames == [4..<6, 6..<8, 8..<10])
        #expect(packet.paddingCount == 255)
        #expect(packet.sampleCount == 3 * 960)
    }

    @Test func code3VBRSignalsAllButTheLastLength() throws {
        let packet = try OpusPacket(parsing: [16 << 3 | 3, 0x80 | 3, 1, 2, 9, 8, 8, 7, 7, 7])
        #expect(packet.frames == [4..<5, 5..<7, 7..<10])
        #expect(packet.sampleCount == 360)
    }

    @Test func requirementsR1ToR7AreEnforced() {
        #expect(throws: WireError.truncated(.opusPacket, needed: 1, available: 0)) {
            try OpusPacket(parsing: [UInt8]())  // R1
        }
        #expect(throws: WireError.malformed(.opusPacket, reason: "a frame is longer than 1275 bytes")) {
            try OpusPacket(parsing: [9 << 3] + [UInt8](repeating: 0, count: 1276))  // R2
        }
        #expect(throws: WireError.malformed(.opusPacket, reason: "code 3 packet has zero frames")) {
            try OpusPacket(parsing: [9 << 3 | 3, 0])  // R5
        }
        #expect(throws: WireError.malformed(.opusPacket, reason: "packet is longer than 120 ms")) {
            try OpusPacket(parsing: [3 << 3 | 3, 3])  // R5: 3 × 60 ms
        }
        #expect(throws: WireError.malformed(.opusPacket, reason: "CBR frame bytes do not divide evenly")) {
            try OpusPacket(parsing: [9 << 3 | 3, 2, 1, 2, 3])  // R6
        }
        #expect(throws: WireError.malformed(.opusPacket, reason: "VBR frame lengths exceed the packet")) {
            try OpusPacket(parsing: [9 << 3 | 3, 0x80 | 2, 10, 1])  // R7
        }
        #expect(throws: WireError.malformed(.opusPacket, reason: "padding is longer than the packet")) {
            try OpusPacket(parsing: [9 << 3 | 3, 0x40 | 1, 10, 1])
        }
    }

    @Test func sampleCountFastPathAgreesWithTheFullParse() throws {
        let packets: [[UInt8]] = [[9 << 3, 1], [9 << 3 | 1, 1, 2], [16 << 3 | 3, 0x80 | 3, 1, 2, 9, 8, 8, 7, 7, 7]]
        for packet in packets {
            let full = try OpusPacket(parsing: packet).sampleCount
            packet.withUnsafeBytes { #expect(OpusPacket.sampleCount($0) == full) }
        }
    }
}
