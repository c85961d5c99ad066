import Foundation

/// Audio held in memory as read from or written to a WAV file: interleaved `Float`
/// samples in −1…1 at any sample rate, mono or stereo.
///
/// Reads RIFF/WAVE with 16-bit integer PCM or 32-bit IEEE float (plain or
/// `WAVE_FORMAT_EXTENSIBLE`), skipping chunks it does not need (`LIST`, `fact`, …).
/// Anything else gets a `WAVError` that says what the file is and how to convert it.
/// The parser survives any bytes: every length is checked against what is there.
public struct WAVAudio: Equatable, Sendable {
    /// How samples are stored in the file.
    public enum Encoding: Sendable, Equatable {
        case pcm16
        case float32

        var bytesPerSample: Int { self == .pcm16 ? 2 : 4 }
        var formatTag: UInt16 { self == .pcm16 ? 1 : 3 }
    }

    public var sampleRate: Int
    public var channels: Int
    /// Interleaved samples (frame after frame), −1…1.
    public var samples: [Float]
    /// The encoding the file had (or will have when written).
    public var encoding: Encoding

    public init(sampleRate: Int, channels: Int = 1, samples: [Float], encoding: Encoding = .pcm16) {
        precondition(channels == 1 || channels == 2, "WAVAudio holds mono or stereo")
        self.sampleRate = sampleRate
        self.channels = channels
        self.samples = samples
        self.encoding = encoding
    }

    /// Frames (one sample per channel).
    public var frameCount: Int { samples.count / channels }

    /// The length in seconds.
    public var duration: Double { Double(frameCount) / Double(sampleRate) }

    /// The first channel, or the average of both for stereo.
    public var mono: [Float] {
        guard channels == 2 else { return samples }
        return (0..<frameCount).map { (samples[2 * $0] + samples[2 * $0 + 1]) * 0.5 }
    }

    // MARK: Reading

    /// Reads a WAV file from disk.
    public init(contentsOf path: String) throws(WAVError) {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            let reason = FileManager.default.fileExists(atPath: path) ? "it cannot be read" : "no such file"
            throw .cannotOpen(path: path, reason: reason)
        }
        let parsed: Result<WAVAudio, WAVError> = data.withUnsafeBytes { bytes in
            do throws(WAVError) { return .success(try WAVAudio(parsing: bytes)) } catch { return .failure(error) }
        }
        self = try parsed.get()
    }

    /// Parses a whole WAV file held in memory.
    public init(parsing bytes: UnsafeRawBufferPointer) throws(WAVError) {
        guard bytes.count >= 12 else { throw .notRIFFWAVE }
        guard Self.tag(bytes, 0) == "RIFF", Self.tag(bytes, 8) == "WAVE" else { throw .notRIFFWAVE }

        var format: (tag: Int, channels: Int, rate: Int, blockAlign: Int, bits: Int)?
        var dataRange: Range<Int>?
        var offset = 12
        // Walk the chunks. A chunk's size is trusted only as far as the bytes go: a writer
        // that streamed the file may leave 0 or 0xFFFFFFFF in the data chunk's size.
        while offset + 8 <= bytes.count {
            let id = Self.tag(bytes, offset)
            let declared = Int(Self.uint32(bytes, offset + 4))
            let start = offset + 8
            let available = bytes.count - start
            let size = min(declared, available)
            switch id {
            case "fmt ":
                guard size >= 16 else { throw .truncated(what: "format chunk") }
                var tag = Int(Self.uint16(bytes, start))
                let channels = Int(Self.uint16(bytes, start + 2))
                let rate = Int(Self.uint32(bytes, start + 4))
                let blockAlign = Int(Self.uint16(bytes, start + 12))
                let bits = Int(Self.uint16(bytes, start + 14))
                if tag == 0xFFFE {
                    // WAVE_FORMAT_EXTENSIBLE: the real format tag is the first two bytes of the sub-format GUID.
                    guard size >= 40 else { throw .truncated(what: "extensible format chunk") }
                    tag = Int(Self.uint16(bytes, start + 24))
                }
                format = (tag, channels, rate, blockAlign, bits)
            case "data":
                dataRange = start..<(start + (declared == 0 || declared == 0xFFFF_FFFF ? available : size))
            default:
                break
            }
            if id == "data", format != nil { break }
            // Chunks are padded to an even size.
            let advance = declared + (declared & 1)
            guard advance <= bytes.count - start else { break }
            offset = start + advance
        }

        guard let format else { throw .missingChunk("fmt ") }
        guard let dataRange else { throw .missingChunk("data") }
        let encoding: Encoding
        switch (format.tag, format.bits) {
        case (1, 16): encoding = .pcm16
        case (3, 32): encoding = .float32
        default: throw .unsupportedEncoding(formatTag: format.tag, bitsPerSample: format.bits)
        }
        guard format.channels == 1 || format.channels == 2 else { throw .unsupportedChannelCount(format.channels) }
        guard (1_000...384_000).contains(format.rate) else {
            throw .invalidHeader("sample rate \(format.rate) Hz is outside 1,000–384,000 Hz")
        }
        guard format.blockAlign == format.channels * encoding.bytesPerSample else {
            throw .invalidHeader("block alignment \(format.blockAlign) does not match \(format.channels) channel(s) of \(format.bits) bits")
        }

        // A trailing partial frame (a cut-off file) is dropped rather than half-read.
        let frameBytes = format.blockAlign
        let frames = dataRange.count / frameBytes
        let count = frames * format.channels
        var samples = [Float](repeating: 0, count: count)
        let base = dataRange.lowerBound
        samples.withUnsafeMutableBufferPointer { out in
            switch encoding {
            case .pcm16:
                for index in 0..<count {
                    out[index] = Float(Int16(bitPattern: Self.uint16(bytes, base + 2 * index))) / 32_768
                }
            case .float32:
                for index in 0..<count {
                    let value = Float(bitPattern: Self.uint32(bytes, base + 4 * index))
                    // NaN or infinity in a file would poison every stage after it.
                    out[index] = value.isFinite ? value : 0
                }
            }
        }
        self.init(sampleRate: format.rate, channels: format.channels, samples: samples, encoding: encoding)
    }

    // MARK: Writing

    /// The file's bytes, in memory: the header ``WAVFileWriter`` writes, then the samples.
    public func serialized() -> [UInt8] {
        let dataBytes = samples.count * encoding.bytesPerSample
        var out = WAVFileWriter.header(sampleRate: sampleRate, channels: channels, encoding: encoding, dataBytes: dataBytes)
        out.reserveCapacity(out.count + dataBytes)
        samples.withUnsafeBufferPointer { WAVFileWriter.encode($0, as: encoding, into: &out) }
        return out
    }

    /// Writes the file through ``WAVFileWriter``, replacing any file at `path`.
    public func write(to path: String) throws(WAVError) {
        let writer = try WAVFileWriter(path: path, sampleRate: sampleRate, channels: channels, encoding: encoding)
        try writer.append(samples)
        try writer.close()
    }

    // MARK: Little-endian reads (callers check bounds first)

    private static func uint16(_ bytes: UnsafeRawBufferPointer, _ at: Int) -> UInt16 {
        UInt16(bytes[at]) | UInt16(bytes[at + 1]) << 8
    }

    private static func uint32(_ bytes: UnsafeRawBufferPointer, _ at: Int) -> UInt32 {
        UInt32(bytes[at]) | UInt32(bytes[at + 1]) << 8 | UInt32(bytes[at + 2]) << 16 | UInt32(bytes[at + 3]) << 24
    }

    private static func tag(_ bytes: UnsafeRawBufferPointer, _ at: Int) -> String {
        String(decoding: bytes[at..<at + 4], as: UTF8.self)
    }
}
