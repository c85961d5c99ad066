/// Holds the recent far-end reference and hands it back `delay` samples late, so the echo
/// canceller sees each played sample at the moment its echo reaches the microphone.
///
/// A ring buffer; `delay` can change at any time (the next read starts from the new
/// position). Plain Swift, not thread-safe.
public struct ReferenceDelayLine {
    private var ring: [Float]
    private var writeIndex = 0
    /// The largest delay the line can give.
    public let capacity: Int

    public init(maximumDelaySamples: Int, frameSamples: Int) {
        capacity = maximumDelaySamples
        ring = [Float](repeating: 0, count: maximumDelaySamples + frameSamples)
    }

    /// Appends `played`, then writes into `delayed` the same number of samples as they were
    /// `delay` samples ago (zeros before anything was played).
    public mutating func push(_ played: UnsafeBufferPointer<Float>, delay: Int, into delayed: UnsafeMutableBufferPointer<Float>) {
        precondition(delay >= 0 && delay <= capacity, "reference delay \(delay) outside 0…\(capacity)")
        precondition(played.count <= ring.count - capacity && delayed.count >= played.count)
        let size = ring.count
        ring.withUnsafeMutableBufferPointer { buffer in
            for index in 0..<played.count {
                buffer[(writeIndex + index) % size] = played[index]
            }
            // The block just written starts at writeIndex; `delay` samples earlier is where
            // the aligned block starts.
            var read = (writeIndex - delay) % size
            if read < 0 { read += size }
            for index in 0..<played.count {
                delayed[index] = buffer[(read + index) % size]
            }
        }
        writeIndex = (writeIndex + played.count) % size
    }
}
