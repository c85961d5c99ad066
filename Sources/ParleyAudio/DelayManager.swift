/// How late packets arrive, and the delay the jitter buffer should aim for because of it
/// (NetEQ's delay manager, in spirit).
///
/// - **Relative delay.** For each packet, transit = arrival time − media time (RTP
///   timestamp / 48 kHz); the clocks' offset cancels when transits are compared. The
///   *floor* is the transit of an on-time packet now: it drops at once to any lower transit
///   and otherwise rises by `floorRise` (2 ms a second, faster than any clock drift, so a
///   sender whose clock runs slow does not leave it behind). A packet's relative delay is
///   its transit above the floor.
/// - **Jitter.** A high quantile (0.97) of relative delay over a memory of a few seconds
///   (`DelayHistogram`), so the target rises within a fraction of a second when the jitter
///   grows and comes back within seconds when it falls.
/// - **Spikes.** A delay far above that quantile (`spikeThresholdSeconds` beyond it, and at
///   least double it) is a spike's: it stays out of the histogram, which would otherwise
///   keep the target high for its whole memory after one stall; `DelayPeakDetector` decides
///   whether spikes recur and so must be covered. A "spike" that goes on for longer than
///   `sustainedSpikeSeconds` is not one: the path's jitter has grown, and the histogram
///   takes those delays from then on.
/// - **Target** = max(jitter quantile, recurring spike height up to
///   `spikeCoverMaximumSeconds`) + `marginSeconds`, clamped.
///   The jitter buffer adds one frame while the stream is losing packets (so the next
///   packet's FEC is there when a packet is missing); that is its decision, not this one's.
///
/// Plain Swift with times passed in (seconds on the receiver's clock); no allocation after
/// `init`, so it may run under the lock the playback thread takes.
public struct DelayManager: Sendable {
    public struct Configuration: Sendable {
        public var quantile: Double = 0.97
        /// Seconds after which a delay's weight in the quantile has fallen to 1/e.
        public var memorySeconds: Double = 2.5
        /// How fast the floor may rise without a packet confirming it, seconds per second.
        public var floorRise: Double = 0.002
        /// A delay this far above the jitter quantile (and at least twice it) is a spike's.
        public var spikeThresholdSeconds: Double = 0.040
        /// A spike longer than this is a change in the path's jitter, not a spike.
        public var sustainedSpikeSeconds: Double = 1.0
        /// Added to the quantile, for the floor's own error and the time between the packet
        /// reaching the socket and the buffer.
        public var marginSeconds: Double = 0.003
        public var minimumSeconds: Double = 0
        public var maximumSeconds: Double = 0.400
        /// The target until `minimumSamples` packets have been measured, or a few over
        /// `estimateAfterSeconds`: a listener who has not spoken yet sends only DTX packets, a few
        /// a second, and a stall met before 25 of them came would otherwise be taken for the
        /// path's jitter and keep the target up until their words arrive.
        public var initialSeconds: Double = 0.040
        public var minimumSamples = 25
        public var estimateAfterSeconds: Double = 2.0
        public var minimumSamplesOverTime = 5
        public var peaks = DelayPeakDetector.Configuration()
        /// Recurring spikes are covered up to this height, not beyond: what a spike holds
        /// back above it is waited for (stretching, then concealment) and its backlog played
        /// out faster. Covering in full would hold every word at the height of the highest
        /// stalls (a stall met on two hops at once is twice one hop's); this leaves 150 ms
        /// under `maximumSeconds` for a spike above the cover to come and go.
        public var spikeCoverMaximumSeconds: Double = 0.250
        public init() {}
    }

    public let configuration: Configuration
    private var histogram: DelayHistogram
    private var peaks: DelayPeakDetector
    private var lastArrival: Double?
    private var firstArrival: Double?
    /// The transit of an on-time packet now: the reference "no delay".
    public private(set) var floor: Double?
    /// The jitter quantile of relative delay (without margin or spikes), seconds.
    public private(set) var jitterSeconds: Double = 0
    /// The height of recurring spikes the target covers (at most `spikeCoverMaximumSeconds`),
    /// seconds (0: none).
    public private(set) var recurringSpikeSeconds: Double = 0
    /// The delay to aim for, seconds.
    public var targetSeconds: Double { target(adding: 0) }
    /// The target before clamping: max(jitter, recurring spikes) + margin, or the initial target.
    private var unclampedTarget: Double

    public init(_ configuration: Configuration = Configuration()) {
        self.configuration = configuration
        histogram = DelayHistogram(memoryPackets: configuration.memorySeconds / 0.020)
        peaks = DelayPeakDetector(configuration.peaks)
        unclampedTarget = configuration.initialSeconds
    }

    /// The target with `extra` seconds of room for repairs (FEC's next packet, redundant
    /// copies), clamped. Room the target already holds above the jitter to ride recurring
    /// spikes serves repairs too (between spikes the packets that carry them come long
    /// before they are needed), so only what it lacks is added. The margin is not added
    /// twice: the packet that carries a repair `extra` later is late by the same jitter, on
    /// the same floor, as the frame's own packet, so the target covers it to the jitter
    /// quantile once it holds `extra` less the margin.
    public func target(adding extra: Double) -> Double {
        let spikeRoom = max(0, recurringSpikeSeconds - jitterSeconds)
        let room = max(0, extra - configuration.marginSeconds - spikeRoom)
        return min(configuration.maximumSeconds, max(configuration.minimumSeconds, unclampedTarget + room))
    }

    /// Records a packet with media time `mediaSeconds` that arrived at `arrival`; returns its
    /// relative delay.
    @discardableResult
    public mutating func record(arrival: Double, mediaSeconds: Double) -> Double {
        let transit = arrival - mediaSeconds
        if let floor, let last = lastArrival {
            self.floor = min(transit, floor + configuration.floorRise * max(0, arrival - last))
        } else {
            floor = transit
        }
        lastArrival = max(lastArrival ?? arrival, arrival)
        if firstArrival == nil { firstArrival = arrival }
        let delay = max(0, transit - (floor ?? transit))

        let spikeLevel = max(jitterSeconds + configuration.spikeThresholdSeconds, 2 * jitterSeconds)
        if hasEstimate(now: arrival), delay > spikeLevel,
           (peaks.currentSpikeDuration(now: arrival) ?? 0) <= configuration.sustainedSpikeSeconds {
            peaks.record(arrival: arrival, delay: delay)
        } else {
            histogram.add(delay)
            jitterSeconds = histogram.quantile(configuration.quantile)
        }
        update(now: arrival)
        return delay
    }

    /// Brings the target up to date at `now` (a recurring spike pattern expires with time).
    public mutating func update(now: Double) {
        guard hasEstimate(now: now) else { return }
        recurringSpikeSeconds = min(configuration.spikeCoverMaximumSeconds, peaks.recurringHeight(now: now) ?? 0)
        unclampedTarget = max(jitterSeconds, recurringSpikeSeconds) + configuration.marginSeconds
    }

    /// Enough packets measured for the jitter quantile to mean something.
    private func hasEstimate(now: Double) -> Bool {
        histogram.count >= configuration.minimumSamples
            || (histogram.count >= configuration.minimumSamplesOverTime && now - (firstArrival ?? now) >= configuration.estimateAfterSeconds)
    }

    /// The relative delay a packet with media time `mediaSeconds` has if it is taken at
    /// `now`: how long after its earliest possible arrival that is; nil before any packet.
    public func delay(ofMediaTime mediaSeconds: Double, at now: Double) -> Double? {
        floor.map { now - mediaSeconds - $0 }
    }

    /// Forgets all history (a new stream).
    public mutating func reset() {
        histogram.reset()
        peaks.reset()
        floor = nil
        lastArrival = nil
        firstArrival = nil
        jitterSeconds = 0
        recurringSpikeSeconds = 0
        unclampedTarget = configuration.initialSeconds
    }
}
