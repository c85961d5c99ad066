/// Tells a one-off delay spike from spikes that recur, so that the jitter buffer's target
/// ignores the first kind and covers the second.
///
/// A *spike* is a run of packets delayed far beyond the usual jitter (the `DelayManager`
/// decides which), merged while they come less than `mergeSeconds` apart: a Wi-Fi scan, a
/// handover, a stalled host. One spike alone leaves the target where it was: the buffer
/// rides it out and then shortens the backlog quickly. When spikes recur, each less than
/// `periodLimitSeconds` after the one before, the target covers them: it becomes the
/// median height of that chain's spikes (of two, the lower), so that a rare higher one (two
/// spikes on two hops at once, a freak delay) does not set the delay for all the others.
/// Spikes less than `sameEventSeconds` apart count as one event: a recurring pattern needs
/// a period, and two stalls a second apart are one stall met on two hops.
/// The chain is forgotten once no spike has come for twice its longest gap.
///
/// Plain Swift, times in seconds on the receiver's clock; a fixed ring of recent spikes.
public struct DelayPeakDetector: Sendable {
    public struct Configuration: Sendable {
        /// Spikes closer than this merge into one (the packets of one stall and its backlog).
        public var mergeSeconds = 0.5
        /// Two spikes closer than this (start to start) make a recurring pattern.
        public var periodLimitSeconds = 12.0
        /// Spikes closer than this (start to start) are one event, not a pattern: the same
        /// stall met on both hops of a relayed path (the talker's uplink, then the listener's
        /// downlink), whose backlogs come a fraction of a second apart.
        public var sameEventSeconds = 2.0
        public init() {}
    }

    private struct Spike: Sendable {
        var start: Double
        var end: Double
        var height: Double
    }

    let configuration: Configuration
    private var spikes: [Spike]
    /// Index of the newest spike in `spikes` (a ring), and how many are held.
    private var newest = 0
    private var held = 0
    private var heights: [Double]

    static let capacity = 9

    init(_ configuration: Configuration = Configuration()) {
        self.configuration = configuration
        spikes = [Spike](repeating: Spike(start: 0, end: 0, height: 0), count: Self.capacity)
        heights = [Double](repeating: 0, count: Self.capacity)
    }

    /// A packet that arrived at `arrival` with `delay` seconds of relative delay, judged a
    /// spike's.
    mutating func record(arrival: Double, delay: Double) {
        if held > 0, arrival - spikes[newest].end <= configuration.mergeSeconds {
            spikes[newest].end = max(spikes[newest].end, arrival)
            spikes[newest].height = max(spikes[newest].height, delay)
            return
        }
        newest = (newest + 1) % Self.capacity
        spikes[newest] = Spike(start: arrival, end: arrival, height: delay)
        held = min(held + 1, Self.capacity)
    }

    /// How long the current spike (if one is going on at `now`) has lasted, seconds.
    func currentSpikeDuration(now: Double) -> Double? {
        guard held > 0, now - spikes[newest].end <= configuration.mergeSeconds else { return nil }
        return spikes[newest].end - spikes[newest].start
    }

    /// The delay the target should cover because spikes recur, or nil if they do not.
    mutating func recurringHeight(now: Double) -> Double? {
        guard held >= 2 else { return nil }
        // Walk back from the newest spike while each is within the period limit of the next.
        var chain = 1
        var longestGap = 0.0
        heights[0] = spikes[newest].height
        var later = spikes[newest]
        for back in 1..<held {
            let earlier = spikes[(newest - back + Self.capacity) % Self.capacity]
            let gap = later.start - earlier.start
            guard gap <= configuration.periodLimitSeconds else { break }
            if gap < configuration.sameEventSeconds {
                // The same event: as high as its highest part.
                heights[chain - 1] = max(heights[chain - 1], earlier.height)
            } else {
                longestGap = max(longestGap, gap)
                heights[chain] = earlier.height
                chain += 1
            }
            later = earlier
        }
        guard chain >= 2, now - spikes[newest].end <= 2 * longestGap else { return nil }
        heights.withUnsafeMutableBufferPointer { $0[0..<chain].sort() }
        return heights[(chain - 1) / 2]
    }

    mutating func reset() {
        held = 0
        newest = 0
    }
}
