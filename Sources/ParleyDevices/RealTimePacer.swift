import ParleyBasics

/// Sleeps a device thread until a frame's due time, measured from the first frame, so a
/// file device keeps the pace of a sound card without drifting: each wait targets an
/// absolute deadline (``MonotonicClock/sleep(until:)``), not "one period from now".
public struct RealTimePacer {
    private let sampleRate: Int
    private var start: UInt64?
    private var frames = 0

    public init(sampleRate: Int) { self.sampleRate = sampleRate }

    /// Waits until `count` more frames are due.
    public mutating func advance(by count: Int) {
        let start = start ?? MonotonicClock.now()
        self.start = start
        frames += count
        MonotonicClock.sleep(until: start + UInt64(frames) * 1_000_000_000 / UInt64(sampleRate))
    }
}
