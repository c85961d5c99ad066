/// The table-of-contents byte that starts every Opus packet (RFC 6716 §3.1).
///
/// ```
///  0 1 2 3 4 5 6 7
/// +-+-+-+-+-+-+-+-+
/// | config  |s| c |
/// +-+-+-+-+-+-+-+-+
/// ```
///
/// `config` picks the mode, audio bandwidth and frame duration (Table 2), `s` is
/// stereo, `c` is the frame-count code (0: one frame, 1: two equal frames, 2: two
/// frames of different sizes, 3: an arbitrary number of frames).
public struct OpusTOC: Sendable, Hashable {
    public enum Mode: Sendable, Hashable { case silk, hybrid, celt }
    public enum Bandwidth: Int, Sendable, Hashable, Comparable {
        case narrowband = 4_000, mediumband = 6_000, wideband = 8_000, superWideband = 12_000, fullband = 20_000
        /// The audio bandwidth in Hz.
        public var hertz: Int { rawValue }
        public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    public let byte: UInt8

    public init(_ byte: UInt8) { self.byte = byte }

    public var config: Int { Int(byte >> 3) }
    public var isStereo: Bool { byte & 0x04 != 0 }
    public var frameCountCode: Int { Int(byte & 0x03) }

    public var mode: Mode {
        switch config {
        case 0...11: return .silk
        case 12...15: return .hybrid
        default: return .celt
        }
    }

    public var bandwidth: Bandwidth {
        switch config {
        case 0...3: return .narrowband
        case 4...7: return .mediumband
        case 8...11: return .wideband
        case 12...13: return .superWideband
        case 14...15: return .fullband
        case 16...19: return .narrowband
        case 20...23: return .wideband
        case 24...27: return .superWideband
        default: return .fullband
        }
    }

    /// Samples per frame at 48 kHz: 120 (2.5 ms) up to 2880 (60 ms), from Table 2.
    public var samplesPerFrame: Int {
        switch config {
        case 0...11: return [480, 960, 1920, 2880][config & 3]  // SILK: 10, 20, 40, 60 ms
        case 12...15: return [480, 960][config & 1]  // Hybrid: 10, 20 ms
        default: return [120, 240, 480, 960][config & 3]  // CELT: 2.5, 5, 10, 20 ms
        }
    }

    /// The frame duration in microseconds.
    public var frameDurationMicroseconds: Int { samplesPerFrame * 1_000_000 / 48_000 }
}

/// An Opus packet's framing (RFC 6716 §3.2), checked against the requirements R1–R7.
///
/// Parsing does not decode audio; it finds how many frames the packet holds, how
/// long it plays and where each frame's bytes are, and rejects any packet a
/// conforming decoder would reject. Code 3 packets have a frame-count byte:
///
/// ```
///  0 1 2 3 4 5 6 7
/// +-+-+-+-+-+-+-+-+
/// |v|p|     M     |   v: variable bitrate, p: padding follows, M: frame count
/// +-+-+-+-+-+-+-+-+
/// ```
public struct OpusPacket: Sendable, Hashable {
    /// The largest frame RFC 6716 allows (R2).
    public static let maximumFrameSize = 1275
    /// The longest packet RFC 6716 allows, in samples at 48 kHz (120 ms, R5).
    public static let maximumSamples = 5760

    public let toc: OpusTOC
    /// Where each frame's bytes lie in the parsed buffer; a zero-length frame is
    /// allowed (DTX or a lost frame in a multi-frame packet).
    public let frames: [Range<Int>]
    /// Bytes of code 3 padding at the end of the packet.
    public let paddingCount: Int

    public var frameCount: Int { frames.count }
    /// Samples the packet decodes to, per channel, at 48 kHz.
    public var sampleCount: Int { frames.count * toc.samplesPerFrame }

    public init(parsing bytes: UnsafeRawBufferPointer) throws(WireError) {
        var reader = ByteReader(bytes, element: .opusPacket)
        // R1: at least one byte.
        let toc = OpusTOC(try reader.readUInt8())
        self.toc = toc
        var frames: [Range<Int>] = []
        var padding = 0

        switch toc.frameCountCode {
        case 0:
            frames = [reader.offset..<bytes.count]
        case 1:
            // R3: the two frames share the remaining bytes evenly.
            let total = reader.remaining
            guard total % 2 == 0 else {
                throw .malformed(.opusPacket, reason: "code 1 packet has an odd number of frame bytes")
            }
            let start = reader.offset
            frames = [start..<start + total / 2, start + total / 2..<bytes.count]
        case 2:
            let first = try Self.readFrameLength(&reader)
            // R4: the first frame fits in what remains.
            guard first <= reader.remaining else {
                throw .malformed(.opusPacket, reason: "code 2 first frame is longer than the packet")
            }
            let start = reader.offset
            frames = [start..<start + first, start + first..<bytes.count]
        default:
            let countByte = try reader.readUInt8()
            let isVBR = countByte & 0x80 != 0
            let hasPadding = countByte & 0x40 != 0
            let count = Int(countByte & 0x3F)
            // R5: at least one frame, at most 120 ms.
            guard count >= 1 else { throw .malformed(.opusPacket, reason: "code 3 packet has zero frames") }
            guard count * toc.samplesPerFrame <= Self.maximumSamples else {
                throw .malformed(.opusPacket, reason: "packet is longer than 120 ms")
            }
            if hasPadding {
                // Each 255 adds 254 bytes of padding and continues; any other value ends the count.
                while true {
                    let byte = Int(try reader.readUInt8())
                    padding += byte == 255 ? 254 : byte
                    if byte != 255 { break }
                }
            }
            guard padding <= reader.remaining else {
                throw .malformed(.opusPacket, reason: "padding is longer than the packet")
            }
            let dataEnd = bytes.count - padding
            if isVBR {
                var lengths: [Int] = []
                for _ in 0..<count - 1 { lengths.append(try Self.readFrameLength(&reader)) }
                // R7: the signalled lengths fit, and the last frame takes the rest.
                let signalled = lengths.reduce(0, +)
                guard reader.offset + signalled <= dataEnd else {
                    throw .malformed(.opusPacket, reason: "VBR frame lengths exceed the packet")
                }
                var start = reader.offset
                for length in lengths {
                    frames.append(start..<start + length)
                    start += length
                }
                frames.append(start..<dataEnd)
            } else {
                // R6: CBR frames divide the remaining bytes evenly.
                let total = dataEnd - reader.offset
                guard total >= 0, total % count == 0 else {
                    throw .malformed(.opusPacket, reason: "CBR frame bytes do not divide evenly")
                }
                let size = total / count
                frames = (0..<count).map { reader.offset + $0 * size..<reader.offset + ($0 + 1) * size }
            }
        }
        // R2: no frame exceeds 1275 bytes.
        guard frames.allSatisfy({ $0.count <= Self.maximumFrameSize }) else {
            throw .malformed(.opusPacket, reason: "a frame is longer than 1275 bytes")
        }
        self.frames = frames
        self.paddingCount = padding
    }

    public init(parsing bytes: [UInt8]) throws(WireError) {
        var result: Result<OpusPacket, WireError>!
        bytes.withUnsafeBytes { raw in
            do throws(WireError) { result = .success(try OpusPacket(parsing: raw)) } catch { result = .failure(error) }
        }
        self = try result.get()
    }

    /// Reads a frame length coded in one or two bytes (RFC 6716 §3.2.1): 0–251 directly,
    /// 252–255 as first + 4 × second, up to 1275.
    private static func readFrameLength(_ reader: inout ByteReader) throws(WireError) -> Int {
        let first = Int(try reader.readUInt8())
        if first < 252 { return first }
        let second = Int(try reader.readUInt8())
        return first + 4 * second
    }

    /// Samples a packet decodes to at 48 kHz, read from its first bytes only; nil when the
    /// packet is malformed. The jitter buffer uses this to conceal exactly what was lost.
    public static func sampleCount(_ bytes: UnsafeRawBufferPointer) -> Int? {
        guard let first = bytes.first else { return nil }
        let toc = OpusTOC(first)
        switch toc.frameCountCode {
        case 0: return toc.samplesPerFrame
        case 1, 2: return 2 * toc.samplesPerFrame
        default:
            guard bytes.count >= 2 else { return nil }
            let count = Int(bytes[1] & 0x3F)
            let samples = count * toc.samplesPerFrame
            return count >= 1 && samples <= maximumSamples ? samples : nil
        }
    }
}
