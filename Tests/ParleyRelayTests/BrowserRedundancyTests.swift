import ParleyBasics
@testable import ParleyRelay
import ParleyWire
import Testing

/// What a browser's RED copies are completed with: the frame its voice's packet two back
/// carried, and nothing else: never another voice's, never a frame from the wrong distance or
/// too long ago, never past the copy's size, whatever order or bytes arrive.
@Suite("Browser RED completion")
struct BrowserRedundancyTests {
    static let red: UInt8 = 63
    static let opus: UInt8 = 111

    /// A sender's packet: RED with a copy one back when `red`, else plain Opus; frame bytes say
    /// whose and which they are.
    static func packet(ssrc: UInt32, sequence: UInt16, timestamp: UInt32? = nil, red: Bool = true, frameSize: Int = 40) throws -> [UInt8] {
        let primary = frame(ssrc: ssrc, sequence: sequence, size: frameSize)
        let payload = red
            ? try OwnedREDPayload(redundant: [.init(payloadType: opus, timestampOffset: 960, data: frame(ssrc: ssrc, sequence: sequence &- 1, size: frameSize))],
                                  primary: .init(payloadType: opus, timestampOffset: 0, data: primary)).serialized()
            : primary
        return try RTPHeader(payloadType: red ? Self.red : opus, sequenceNumber: sequence,
                             timestamp: timestamp ?? UInt32(sequence) &* 960, ssrc: ssrc).serialized(payload: payload)
    }

    static func frame(ssrc: UInt32, sequence: UInt16, size: Int = 40) -> [UInt8] {
        [UInt8(truncatingIfNeeded: ssrc), UInt8(truncatingIfNeeded: sequence)] + [UInt8](repeating: 0x5A, count: max(0, size - 2))
    }

    /// Completes `packet` as the browser's copy, in a buffer with the room the transport gives.
    /// Bytes that are not RTP come back as they are: the transport never hands such bytes on.
    static func complete(_ frames: inout EarlierFrames, _ packet: [UInt8], now: UInt64 = 1) -> [UInt8] {
        var buffer = packet + [UInt8](repeating: 0xEE, count: EarlierFrames.maximumGrowth)
        let count = buffer.withUnsafeMutableBytes { buffer in
            guard let view = try? RTPPacketView(parsing: UnsafeRawBufferPointer(rebasing: buffer[0..<packet.count])) else { return packet.count }
            return frames.complete(view, in: buffer, red: red, opus: opus, nowNanoseconds: now)
        }
        return Array(buffer.prefix(count))
    }

    /// The redundant blocks' (offset, data) of a copy.
    static func copies(_ packet: [UInt8]) throws -> [(offset: UInt16, data: [UInt8])] {
        let payload = try RTPPacketView.withParsed(packet) { Array($0.payload) }
        return try OwnedREDPayload(parsing: payload).redundant.map { ($0.timestampOffset, $0.data) }
    }

    @Test func eachVoiceIsCompletedWithItsOwnFrameFromTwoPacketsBack() throws {
        var frames = EarlierFrames()
        // Two voices interleaved, as the relay forwards them; the first of each is plain Opus.
        _ = Self.complete(&frames, try Self.packet(ssrc: 1, sequence: 10, red: false))
        _ = Self.complete(&frames, try Self.packet(ssrc: 2, sequence: 500))
        _ = Self.complete(&frames, try Self.packet(ssrc: 1, sequence: 11))
        _ = Self.complete(&frames, try Self.packet(ssrc: 2, sequence: 501))
        let first = Self.complete(&frames, try Self.packet(ssrc: 1, sequence: 12))
        let second = Self.complete(&frames, try Self.packet(ssrc: 2, sequence: 502))
        let firstCopies = try Self.copies(first)
        #expect(firstCopies.map(\.offset) == [1_920, 960])
        #expect(firstCopies.first?.data == Self.frame(ssrc: 1, sequence: 10))
        #expect(try Self.copies(second).first?.data == Self.frame(ssrc: 2, sequence: 500))
        // The packet's own header and primary are the sender's.
        let (header, payload) = try RTPPacketView.withParsed(first) { (RTPHeader($0), Array($0.payload)) }
        #expect(header.sequenceNumber == 12 && header.ssrc == 1 && header.timestamp == 12 * 960)
        #expect(try OwnedREDPayload(parsing: payload).primary.data == Self.frame(ssrc: 1, sequence: 12))
    }

    @Test func aFrameFromTheWrongDistanceOrTooLongAgoIsNeverAdded() throws {
        var frames = EarlierFrames()
        // Packet 11 never came: 12 has nothing two back... and 13 nothing either (11 is missing).
        _ = Self.complete(&frames, try Self.packet(ssrc: 1, sequence: 10))
        #expect(try Self.copies(Self.complete(&frames, try Self.packet(ssrc: 1, sequence: 13))).map(\.offset) == [960])
        // A pause: 15's timestamp is more than 14 bits after 13's.
        #expect(try Self.copies(Self.complete(&frames, try Self.packet(ssrc: 1, sequence: 15, timestamp: 13 * 960 + 20_000))).map(\.offset) == [960])
        // Timestamps that go backwards (a peer's numbers): nothing.
        #expect(try Self.copies(Self.complete(&frames, try Self.packet(ssrc: 1, sequence: 17, timestamp: 0))).map(\.offset) == [960])
        // Plain Opus stays plain Opus.
        _ = Self.complete(&frames, try Self.packet(ssrc: 1, sequence: 20))
        let plain = try Self.packet(ssrc: 1, sequence: 22, red: false)
        #expect(Self.complete(&frames, plain) == plain)
    }

    @Test func aLatePacketNeverPushesOutANewerFrame() throws {
        var frames = EarlierFrames()
        // Across the sequence numbers' wrap: 65_533 is frame 0, 2 is frame 5.
        func packet(_ sequence: UInt16) throws -> [UInt8] {
            try Self.packet(ssrc: 7, sequence: sequence, timestamp: 100_000 + UInt32(sequence &- 65_533) * 960)
        }
        for sequence: UInt16 in [65_534, 0, 65_535, 65_533] { _ = Self.complete(&frames, try packet(sequence)) }
        // 65_533 came last but is older than 65_535, which shares its cell: 65_535 stays.
        #expect(try Self.copies(Self.complete(&frames, try packet(1))).first?.data == Self.frame(ssrc: 7, sequence: 65_535))
        #expect(try Self.copies(Self.complete(&frames, try packet(2))).first?.data == Self.frame(ssrc: 7, sequence: 0))
    }

    @Test func longFramesAreNotKeptAndACopyStaysWithinItsSize() throws {
        var frames = EarlierFrames()
        _ = Self.complete(&frames, try Self.packet(ssrc: 1, sequence: 1, frameSize: EarlierFrames.frameCapacity + 1))
        _ = Self.complete(&frames, try Self.packet(ssrc: 1, sequence: 2, frameSize: 400))
        #expect(try Self.copies(Self.complete(&frames, try Self.packet(ssrc: 1, sequence: 3, frameSize: 40))).count == 1, "frame 1 was too long to keep")
        // Frame 2 (400 bytes) would take packet 4 (two 400-byte frames already) past 1,200 bytes.
        let large = Self.complete(&frames, try Self.packet(ssrc: 1, sequence: 4, frameSize: 400))
        #expect(try Self.copies(large).count == 1)
        #expect(large.count <= EarlierFrames.maximumPacketSize)
    }

    @Test func moreVoicesThanItKeepsForgetTheLeastRecentlyHeard() throws {
        var frames = EarlierFrames()
        let voices = UInt32(EarlierFrames.voiceCapacity + 1)
        for ssrc in 1...voices { _ = Self.complete(&frames, try Self.packet(ssrc: ssrc, sequence: 1), now: UInt64(ssrc)) }
        // Voice 1 was forgotten to make room for the last; voice 2 is remembered.
        #expect(try Self.copies(Self.complete(&frames, try Self.packet(ssrc: 2, sequence: 3), now: 100)).count == 2)
        #expect(try Self.copies(Self.complete(&frames, try Self.packet(ssrc: 1, sequence: 3), now: 101)).count == 1)
    }

    @Test func anyBytesPassWithoutATrapAndNeverPastTheBuffer() throws {
        var frames = EarlierFrames()
        var rng = SplitMix64(seed: 0x4252_4544)
        let valid = try (0..<4).map { try Self.packet(ssrc: 9, sequence: UInt16($0)) }
        for round in 0..<20_000 {
            var bytes: [UInt8]
            if round % 2 == 0 {
                bytes = (0..<Int(rng.next() % 120)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                if !bytes.isEmpty { bytes[0] = 0x80 | bytes[0] & 0x3F }
                if bytes.count > 1 { bytes[1] = [Self.red, Self.opus, bytes[1]][Int(rng.next() % 3)] }
            } else {
                bytes = valid[round % 4]
                bytes = Array(bytes.prefix(Int(rng.next() % UInt64(bytes.count + 1))))
                if !bytes.isEmpty { bytes[Int(rng.next() % UInt64(bytes.count))] ^= UInt8(truncatingIfNeeded: rng.next() | 1) }
            }
            let result = Self.complete(&frames, bytes, now: UInt64(round))
            #expect(result.count == bytes.count || result.count > bytes.count + 4)
            #expect(result.count <= bytes.count + EarlierFrames.maximumGrowth)
        }
    }
}
