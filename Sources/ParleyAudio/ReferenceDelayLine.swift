/// The recent far-end reference, for a caller that hands it over as it is played (an
/// offline run, a benchmark): appended a frame at a time, read back any number of samples
/// late, so the echo canceller sees each played sample when its echo reaches the microphone.
///
/// A ring buffer; the delay of each read is free (the next read starts from the new
/// position). Plain Swift, not thread-safe. A live call reads `EchoReferenceTap` instead,
/// which the playback thread fills.
public struct ReferenceDelayLine: PlayedSignal {
    private var ring: [Float]
    /// Where the last appended block starts.
    private var blockStart = 0
    private var blockCount = 0
    /// The largest delay the line can give.
    public let capacity: Int

    public init(maximumDelaySamples: Int, frameSamples: Int) {
        capacity = maximumDelaySamples
        ring = [Float](repeating: 0, count: maximumDelaySamples + frameSamples)
    }

    /// Appends `played`: what went to the speaker over the interval of the next capture frame.
    public mutating func append(_ played: UnsafeBufferPointer<Float>) {
        precondition(played.count <= ring.count - capacity, "a block of \(played.count) samples is longer than a frame")
        let size = ring.count
        let start = (blockStart + blockCount) % size
        if let source = played.baseAddress {
            ring.withUnsafeMutableBufferPointer { buffer in
                // At most two runs: to the end of the ring, then from its start.
                let first = min(played.count, size - start)
                (buffer.baseAddress! + start).update(from: source, count: first)
                if first < played.count { buffer.baseAddress!.update(from: source + first, count: played.count - first) }
            }
        }
        blockStart = start
        blockCount = played.count
    }

    /// The samples played `delay` samples before the last appended block (zeros before
    /// anything was played).
    public func read(delay: Int, into output: UnsafeMutableBufferPointer<Float>) {
        precondition(delay >= 0 && delay <= capacity, "reference delay \(delay) outside 0…\(capacity)")
        precondition(output.count <= ring.count - capacity)
        let size = ring.count
        var read = (blockStart - delay) % size
        if read < 0 { read += size }
        guard let target = output.baseAddress else { return }
        ring.withUnsafeBufferPointer { buffer in
            let first = min(output.count, size - read)
            target.update(from: buffer.baseAddress! + read, count: first)
            if first < output.count { (target + first).update(from: buffer.baseAddress!, count: output.count - first) }
        }
    }
}
