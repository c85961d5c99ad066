import Foundation

/// A WAV file written as the audio comes, so a long call never piles up in memory: samples
/// are converted into a fixed buffer, appended to the file every half second, and the
/// header's sizes are filled in on ``close()``. Until then the data chunk's size reads
/// 0xFFFFFFFF, which WAV readers (``WAVAudio`` included) take as "to the end", so a file
/// cut short by a crash still plays.
///
/// The one WAV writer: the call's recordings, the `--output` file device and
/// ``WAVAudio/write(to:)`` all go through it. Not thread-safe: one thread writes.
public final class WAVFileWriter {
    public let path: String
    public let sampleRate: Int
    public let channels: Int
    public let encoding: WAVAudio.Encoding
    private let handle: FileHandle
    private var pending: [UInt8] = []
    private let flushBytes: Int
    /// Samples appended so far (interleaved: frames × channels).
    public private(set) var sampleCount = 0
    private var closed = false

    /// Creates (or truncates) the file; throws a `WAVError` that names it if it cannot.
    public init(path: String, sampleRate: Int = AudioClock.sampleRate, channels: Int = 1, encoding: WAVAudio.Encoding = .pcm16) throws(WAVError) {
        precondition(channels == 1 || channels == 2, "WAV files are written mono or stereo")
        self.path = path
        self.sampleRate = sampleRate
        self.channels = channels
        self.encoding = encoding
        flushBytes = sampleRate * channels * encoding.bytesPerSample / 2
        let header = Self.header(sampleRate: sampleRate, channels: channels, encoding: encoding, dataBytes: nil)
        guard FileManager.default.createFile(atPath: path, contents: Data(header)),
              let handle = FileHandle(forWritingAtPath: path) else {
            throw .cannotWrite(path: path, reason: Self.reason(for: path))
        }
        self.handle = handle
        handle.seekToEndOfFile()
        pending.reserveCapacity(flushBytes + 4_096)
    }

    deinit { try? close() }

    public func append(_ samples: UnsafeBufferPointer<Float>) throws(WAVError) {
        Self.encode(samples, as: encoding, into: &pending)
        sampleCount += samples.count
        if pending.count >= flushBytes { try flush() }
    }

    public func append(_ samples: [Float]) throws(WAVError) {
        try samples.withUnsafeBufferPointer { buffer throws(WAVError) in try append(buffer) }
    }

    /// Appends `count` samples of silence.
    public func appendSilence(_ count: Int) throws(WAVError) {
        guard count > 0 else { return }
        var left = count
        while left > 0 {
            let now = min(left, max(1, (flushBytes - pending.count) / encoding.bytesPerSample))
            pending.append(contentsOf: repeatElement(0, count: now * encoding.bytesPerSample))
            left -= now
            sampleCount += now
            if pending.count >= flushBytes { try flush() }
        }
    }

    /// Appends the samples as the file stores them (little-endian).
    static func encode(_ samples: UnsafeBufferPointer<Float>, as encoding: WAVAudio.Encoding, into bytes: inout [UInt8]) {
        func append(_ value: some FixedWidthInteger) { withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) } }
        switch encoding {
        case .pcm16:
            for sample in samples { append(UInt16(bitPattern: SampleConversion.int16(sample))) }
        case .float32:
            for sample in samples { append(sample.bitPattern) }
        }
    }

    private func flush() throws(WAVError) {
        guard !pending.isEmpty else { return }
        do {
            try handle.write(contentsOf: pending)
        } catch {
            throw .cannotWrite(path: path, reason: "\(error.localizedDescription)")
        }
        pending.removeAll(keepingCapacity: true)
    }

    /// Writes what is buffered and the header's final sizes, and closes the file.
    public func close() throws(WAVError) {
        guard !closed else { return }
        closed = true
        defer { try? handle.close() }
        try flush()
        do {
            try handle.seek(toOffset: 0)
            let dataBytes = sampleCount * encoding.bytesPerSample
            try handle.write(contentsOf: Self.header(sampleRate: sampleRate, channels: channels, encoding: encoding, dataBytes: dataBytes))
        } catch {
            throw .cannotWrite(path: path, reason: "\(error.localizedDescription)")
        }
    }

    /// The canonical 44-byte header (`fmt ` of 16 bytes, then `data`); unknown sizes are
    /// written as 0xFFFFFFFF.
    public static func header(sampleRate: Int, channels: Int = 1, encoding: WAVAudio.Encoding = .pcm16, dataBytes: Int?) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(44)
        func append32(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) } }
        func append16(_ value: UInt16) { withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) } }
        out.append(contentsOf: Array("RIFF".utf8))
        append32(dataBytes.map { UInt32(clamping: 36 + $0) } ?? 0xFFFF_FFFF)
        out.append(contentsOf: Array("WAVEfmt ".utf8))
        append32(16)
        append16(encoding.formatTag)
        append16(UInt16(channels))
        append32(UInt32(sampleRate))
        append32(UInt32(sampleRate * channels * encoding.bytesPerSample))
        append16(UInt16(channels * encoding.bytesPerSample))
        append16(UInt16(encoding.bytesPerSample * 8))
        out.append(contentsOf: Array("data".utf8))
        append32(dataBytes.map { UInt32(clamping: $0) } ?? 0xFFFF_FFFF)
        return out
    }

    /// Why a file cannot be created, as far as the file system tells.
    public static func reason(for path: String) -> String {
        let directory = (path as NSString).deletingLastPathComponent
        let folder = directory.isEmpty ? "." : directory
        var isDirectory: ObjCBool = false
        if !FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory) { return "the folder \(folder) does not exist" }
        if !isDirectory.boolValue { return "\(folder) is not a folder" }
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue { return "it is a folder" }
        return "permission denied, or the disk is full"
    }
}
