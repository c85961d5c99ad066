/// Tracks how late packets arrive relative to the fastest one over a sliding window, and
/// turns it into the jitter buffer's target delay.
///
/// For each packet, transit = arrival time − media time (RTP timestamp / 48 kHz); the
/// clocks' offset cancels out when transits are compared. The relative delay of a packet
/// is its transit minus the smallest transit in the window; the target is a high quantile
/// (0.95) of the relative delays plus a margin, clamped. The window (6 s) sets how fast
/// the target comes down after the jitter falls: high values leave it 6 s later. It goes
/// up as soon as 5 % of the window is late, a fraction of a second. Drift between the
/// sender's and the receiver's clock moves all transits slowly together and shifts the
/// quantile by at most the drift over one window (3 ms at 500 ppm).
///
/// Plain Swift: times are passed in, in seconds on the receiver's clock.
public struct ArrivalDelayTracker: Sendable {
    public struct Configuration: Sendable {
        public var quantile: Double = 0.95
        public var windowSeconds: Double = 6
        /// Added to the quantile: the playout granularity and the resampler's look-ahead.
        public var marginSeconds: Double = 0.0125
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
    public private(set) var targetSeconds: Double
    /// The smallest transit in the window: the reference "on time".
    public private(set) var minimumTransit: Double?
    /// The measured quantile of relative delay (without margin or clamping).
    public private(set) var quantileSeconds: Double = 0

    public init(_ configuration: Configuration = Configuration()) {
        self.configuration = configuration
        targetSeconds = configuration.initialSeconds
    }

    public mutating func record(arrival: Double, mediaSeconds: Double) {
        let transit = arrival - mediaSeconds
        samples.append((arrival, transit))
        while head < samples.count, samples[head].arrival < arrival - configuration.windowSeconds { head += 1 }
        // Compact now and then rather than shifting the array on every packet.
        if head > 512 {
            samples.removeFirst(head)
            head = 0
        }
        if minimumTransit == nil || transit < minimumTransit! { minimumTransit = transit }
        if arrival - lastRecompute >= configuration.recomputeIntervalSeconds { recompute(now: arrival) }
    }

    private mutating func recompute(now: Double) {
        lastRecompute = now
        let window = samples[head...].map(\.transit)
        guard let minimum = window.min() else { return }
        minimumTransit = minimum
        guard window.count >= configuration.minimumSamples else { return }
        let sorted = window.sorted()
        let index = min(sorted.count - 1, Int((configuration.quantile * Double(sorted.count)).rounded(.up)) - 1)
        quantileSeconds = sorted[max(0, index)] - minimum
        targetSeconds = min(configuration.maximumSeconds, max(configuration.minimumSeconds, quantileSeconds + configuration.marginSeconds))
    }

    /// Forgets all history (a new stream).
    public mutating func reset() {
        samples.removeAll()
        head = 0
        minimumTransit = nil
        lastRecompute = -.infinity
        quantileSeconds = 0
        targetSeconds = configuration.initialSeconds
    }
}
