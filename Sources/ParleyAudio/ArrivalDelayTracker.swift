/// Tracks how late packets arrive relative to the fastest ones, and turns it into the
/// jitter buffer's target delay.
///
/// For each packet, transit = arrival time − media time (RTP timestamp / 48 kHz); the
/// clocks' offset cancels out when transits are compared. The *floor* is the transit of an
/// on-time packet now: it drops at once to any lower transit and otherwise rises slowly
/// (`floorRise`, 2 ms per second, faster than any clock drift), so a sender whose clock
/// runs slow, whose transits creep upwards, does not leave the floor behind as a window
/// minimum would (by 3 ms over 6 s at 500 ppm, enough to run the buffer dry).
///
/// A packet's relative delay is its transit minus the floor as it is when the target is
/// computed; the target is a high quantile (0.97) of relative delays over a sliding
/// window plus a margin, clamped. The window (6 s) sets how fast the target comes down
/// after the jitter falls: the high values leave it 6 s later. It goes up as soon as 3 %
/// of the window is late, a fraction of a second. (On a path of 240 ± 57 ms, the
/// simulator's jitter-40 on both hops, 0.95 and 0.97 did about as well: what made 14–17 %
/// of frames miss their time there was not the target but each turn's first packet
/// playing on arrival; see `JitterBuffer`'s DTX.)
///
/// Plain Swift: times are passed in, in seconds on the receiver's clock.
public struct ArrivalDelayTracker: Sendable {
    public struct Configuration: Sendable {
        public var quantile: Double = 0.97
        public var windowSeconds: Double = 6
        /// How fast the floor may rise without a packet confirming it, seconds per second.
        public var floorRise: Double = 0.002
        /// Added to the quantile: one playback period (the buffer decodes up to a period
        /// ahead), the resampler's look-ahead, and a few ms for the floor's own error.
        public var marginSeconds: Double = 0.015
        public var minimumSeconds: Double = 0.020
        public var maximumSeconds: Double = 0.400
        public var initialSeconds: Double = 0.070
        /// Packets needed before the measured quantile replaces the initial target.
        public var minimumSamples = 25
        /// The quantile is recomputed at most this often (it sorts the window).
        public var recomputeIntervalSeconds: Double = 0.1
        public init() {}
    }

    public let configuration: Configuration
    /// (arrival, transit) for packets in the window, oldest first.
    private var samples: [(arrival: Double, transit: Double)] = []
    private var head = 0
    private var lastRecompute = -Double.infinity
    private var lastArrival: Double?
    public private(set) var targetSeconds: Double
    /// The transit of an on-time packet now: the reference "no delay".
    public private(set) var minimumTransit: Double?
    /// The measured quantile of relative delay (without margin or clamping).
    public private(set) var quantileSeconds: Double = 0

    public init(_ configuration: Configuration = Configuration()) {
        self.configuration = configuration
        targetSeconds = configuration.initialSeconds
    }

    public mutating func record(arrival: Double, mediaSeconds: Double) {
        let transit = arrival - mediaSeconds
        if let floor = minimumTransit, let last = lastArrival {
            minimumTransit = min(transit, floor + configuration.floorRise * max(0, arrival - last))
        } else {
            minimumTransit = transit
        }
        lastArrival = max(lastArrival ?? arrival, arrival)
        samples.append((arrival, transit))
        while head < samples.count, samples[head].arrival < arrival - configuration.windowSeconds { head += 1 }
        // Compact now and then rather than shifting the array on every packet.
        if head > 512 {
            samples.removeFirst(head)
            head = 0
        }
        if arrival - lastRecompute >= configuration.recomputeIntervalSeconds { recompute(now: arrival) }
    }

    private mutating func recompute(now: Double) {
        lastRecompute = now
        let count = samples.count - head
        guard count >= configuration.minimumSamples else { return }
        // Against the floor as it is now: a delay kept relative to the floor at its arrival
        // would understate itself for the whole window after the floor drops to a new low.
        let sorted = samples[head...].map(\.transit).sorted()
        let index = min(count - 1, max(0, Int((configuration.quantile * Double(count)).rounded(.up)) - 1))
        quantileSeconds = max(0, sorted[index] - (minimumTransit ?? sorted[0]))
        targetSeconds = min(configuration.maximumSeconds, max(configuration.minimumSeconds, quantileSeconds + configuration.marginSeconds))
    }

    /// Forgets all history (a new stream).
    public mutating func reset() {
        samples.removeAll()
        head = 0
        minimumTransit = nil
        lastArrival = nil
        lastRecompute = -.infinity
        quantileSeconds = 0
        targetSeconds = configuration.initialSeconds
    }
}
