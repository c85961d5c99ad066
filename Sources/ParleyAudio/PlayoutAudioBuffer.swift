/// Decoded audio between the decoder and the speaker: the samples not yet played
/// (*pending*), and behind them the last ones played (*history*), which time-stretching
/// reads to find the pitch and to continue a waveform where it left off.
///
/// One preallocated array, mono or interleaved; nothing allocates after `init`, so the
/// playback thread can use it under its lock. Pending audio may be changed in place
/// (time-stretched, spliced); history never is: it has already been heard.
struct PlayoutAudioBuffer {
    let channels: Int
    /// Samples per channel kept behind the read position for analysis.
    let historyLength: Int
    private(set) var storage: [Float]
    /// Frame indices (samples per channel) into `storage`.
    private(set) var readIndex: Int
    private(set) var writeIndex: Int

    /// - Parameters:
    ///   - history: samples per channel kept after they are played.
    ///   - capacity: the most pending audio the buffer holds, per channel.
    init(channels: Int, history: Int, capacity: Int) {
        self.channels = channels
        historyLength = history
        storage = [Float](repeating: 0, count: (history + capacity) * channels)
        readIndex = history
        writeIndex = history
    }

    /// Samples per channel decoded and not yet played.
    var pending: Int { writeIndex - readIndex }

    /// Samples per channel that can still be appended before `compact` is needed.
    var freeSpace: Int { storage.count / channels - writeIndex }

    /// Room for `count` more samples per channel at the write position, for a decoder to fill;
    /// `commit` then makes them pending.
    mutating func reserveSpace(_ count: Int) -> Bool {
        if freeSpace < count { compact() }
        return freeSpace >= count
    }

    /// Calls `body` with the free space after the pending audio (interleaved); `body` returns
    /// how many samples per channel it wrote, which become pending.
    mutating func append(upTo count: Int, _ body: (UnsafeMutableBufferPointer<Float>) -> Int) -> Int {
        guard reserveSpace(count) else { return 0 }
        let channels = self.channels
        let start = writeIndex
        let written = storage.withUnsafeMutableBufferPointer { all in
            body(UnsafeMutableBufferPointer(rebasing: all[start * channels..<(start + count) * channels]))
        }
        writeIndex += max(0, min(written, count))
        return written
    }

    /// Appends `count` samples per channel of silence.
    mutating func appendSilence(_ count: Int) {
        _ = append(upTo: count) { buffer in
            buffer.update(repeating: 0)
            return count
        }
    }

    /// Plays `output.count / channels` samples per channel: copies them out and moves them
    /// into history. Missing samples (more asked than pending) are written as silence.
    mutating func read(into output: UnsafeMutableBufferPointer<Float>) {
        let wanted = output.count / channels
        let available = min(wanted, pending)
        let channels = self.channels
        let start = readIndex
        storage.withUnsafeBufferPointer { all in
            for index in 0..<available * channels { output[index] = all[start * channels + index] }
        }
        for index in available * channels..<output.count { output[index] = 0 }
        readIndex += available
    }

    /// Calls `body` with the whole storage (history then pending, interleaved), the frame
    /// index of the read position and that of the write position.
    mutating func withSamples<Result>(
        _ body: (_ samples: UnsafeMutableBufferPointer<Float>, _ readIndex: Int, _ writeIndex: Int) -> Result
    ) -> Result {
        let read = readIndex, write = writeIndex
        return storage.withUnsafeMutableBufferPointer { body($0, read, write) }
    }

    /// Drops all pending audio (a new stream, or a speaker who went quiet).
    mutating func discardPending() { writeIndex = readIndex }

    /// Removes `count` pending samples per channel starting `offset` samples after the read
    /// position, closing the gap (the caller cross-faded around it first).
    mutating func remove(atPendingOffset offset: Int, count: Int) {
        precondition(offset >= 0 && count >= 0 && offset + count <= pending)
        let channels = self.channels
        let start = readIndex + offset
        let end = writeIndex
        storage.withUnsafeMutableBufferPointer { all in
            var to = start * channels
            for from in (start + count) * channels..<end * channels {
                all[to] = all[from]
                to += 1
            }
        }
        writeIndex -= count
    }

    /// Opens a gap of `count` samples per channel `offset` samples after the read position
    /// by moving what follows; the gap's contents are left for the caller to write.
    mutating func insertGap(atPendingOffset offset: Int, count: Int) -> Bool {
        precondition(offset >= 0 && offset <= pending)
        guard reserveSpace(count) else { return false }
        let channels = self.channels
        let start = readIndex + offset
        let end = writeIndex
        storage.withUnsafeMutableBufferPointer { all in
            var from = end * channels - 1
            while from >= start * channels {
                all[from + count * channels] = all[from]
                from -= 1
            }
        }
        writeIndex += count
        return true
    }

    /// Moves the history and pending audio to the start of the storage, so the write
    /// position has room again.
    mutating func compact() {
        let keep = min(historyLength, readIndex)
        let from = readIndex - keep
        guard from > 0 else { return }
        let channels = self.channels
        let end = writeIndex
        storage.withUnsafeMutableBufferPointer { all in
            var to = 0
            for index in from * channels..<end * channels {
                all[to] = all[index]
                to += 1
            }
        }
        readIndex -= from
        writeIndex -= from
    }
}
