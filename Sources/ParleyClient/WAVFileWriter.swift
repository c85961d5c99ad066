import Foundation
import ParleyAudio

/// A 16-bit mono WAV file written as the call goes (`--record-raw`, `--record-sent`,
/// `--record-received`), so a long call does not pile up in memory: samples are converted
/// and buffered, appended to the file every half second, and the header's sizes are filled
/// in on `close()`. A file cut short by a crash still plays: its data chunk's size is
/// left at 0xFFFFFFFF until then, which WAV readers (Parley's included) read as "to the end".
///
/// Not thread-safe: one thread writes (the capture or playback thread that owns it).
public final class WAVFileWriter {
    public let path: String
    public let sampleRate: Int
    private let handle: FileHandle
    private var pending: [UInt8] = []
    private let flushBytes: Int
    /// Samples appended so far.
    public private(set) var sampleCount = 0
    private var closed = false

    /// Creates (or truncates) the file; throws a `WAVError` that names it if it cannot.
    public init(path: String, sampleRate: Int = AudioClock.sampleRate) throws(WAVError) {
        self.path = path
        self.sampleRate = sampleRate
        flushBytes = sampleRate  // half a second of 16-bit samples
        guard FileManager.default.createFile(atPath: path, contents: Data(Self.header(sampleRate: sampleRate, dataBytes: nil))),
              let handle = FileHandle(forWritingAtPath: path) else {
            throw .cannotWrite(path: path, reason: Self.reason(for: path))
        }
        self.handle = handle
        handle.seekToEndOfFile()
        pending.reserveCapacity(flushBytes + 4_096)
    }

    deinit { try? close() }

    public func append(_ samples: UnsafeBufferPointer<Float>) throws(WAVError) {
        for sample in samples {
            let value = UInt16(bitPattern: SampleConversion.int16(sample))
            pending.append(UInt8(value & 0xFF))
            pending.append(UInt8(value >> 8))
        }
        sampleCount += samples.count
        if pending.count >= flushBytes { try flush() }
    }

    /// Appends `count` samples of silence.
    public func appendSilence(_ count: Int) throws(WAVError) {
        guard count > 0 else { return }
        pending.append(contentsOf: repeatElement(0, count: 2 * count))
        sampleCount += count
        if pending.count >= flushBytes { try flush() }
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
            try handle.write(contentsOf: Self.header(sampleRate: sampleRate, dataBytes: 2 * sampleCount))
        } catch {
            throw .cannotWrite(path: path, reason: "\(error.localizedDescription)")
        }
    }

    /// The canonical 44-byte header; unknown sizes are written as 0xFFFFFFFF.
    static func header(sampleRate: Int, dataBytes: Int?) -> [UInt8] {
        var out: [UInt8] = []
        func append32(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) } }
        func append16(_ value: UInt16) { withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) } }
        let data = dataBytes.map { UInt32(clamping: $0) } ?? 0xFFFF_FFFF
        out.append(contentsOf: Array("RIFF".utf8))
        append32(dataBytes.map { UInt32(clamping: 36 + $0) } ?? 0xFFFF_FFFF)
        out.append(contentsOf: Array("WAVEfmt ".utf8))
        append32(16)
        append16(1)  // integer PCM
        append16(1)  // mono
        append32(UInt32(sampleRate))
        append32(UInt32(sampleRate * 2))
        append16(2)
        append16(16)
        out.append(contentsOf: Array("data".utf8))
        append32(data)
        return out
    }

    /// Why a file cannot be created, as far as the file system tells.
    static func reason(for path: String) -> String {
        let directory = (path as NSString).deletingLastPathComponent
        let folder = directory.isEmpty ? "." : directory
        var isDirectory: ObjCBool = false
        if !FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory) { return "the folder \(folder) does not exist" }
        if !isDirectory.boolValue { return "\(folder) is not a folder" }
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue { return "it is a folder" }
        return "permission denied, or the disk is full"
    }
}
