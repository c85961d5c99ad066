/// One-way delay: a mean delay, jitter around it, recurring spikes, and any per-packet delay
/// a replayed trace adds; either as a FIFO link (no reordering) or as a path whose packets
/// may overtake each other.
///
/// Each packet's delay is `delay + jitter sample + spike + trace delay`, clamped at zero.
/// With `reorder` on, every packet is delivered at its own arrival plus that delay, so a
/// packet with a short delay overtakes one sent just before it with a long one. With
/// `reorder` off, the path is a FIFO: a packet never leaves before the one ahead of it, so
/// it queues behind a delayed packet (its delivery is the later of its own and the previous
/// one's). That raises the mean delay and narrows the spread: at 50 packets a second, a
/// normal jitter of 20 ms around 40 ms becomes about 44 ms ± 17 ms. (netem reorders
/// whenever jitter is set; ours does only when asked.)
public struct DelayModel: Sendable {
    public let delay: Duration
    public let jitter: Duration
    public let distribution: JitterDistribution
    public let reorder: Bool
    public let spike: DelaySpike?

    private let delayNanoseconds: Int64
    private let jitterNanoseconds: Double
    private var random: SeededRandom
    private var lastDelivery = Int64.min
    private var reorderCounter = ReorderCounter()
    private var delays = DelayStatistics()
    private var packets = 0

    public init(
        delay: Duration, jitter: Duration = .zero, distribution: JitterDistribution = .normal,
        reorder: Bool = false, spike: DelaySpike? = nil, seed: UInt64
    ) {
        precondition(delay >= .zero && jitter >= .zero, "negative delay or jitter; validate with Impairment.validate()")
        self.delay = delay
        self.jitter = jitter
        self.distribution = distribution
        self.reorder = reorder
        self.spike = spike
        delayNanoseconds = delay.nanoseconds
        jitterNanoseconds = Double(jitter.nanoseconds)
        random = SeededRandom(seed: seed)
    }

    /// When a copy of `packet` that reaches the delay stage at `arrival` (nanoseconds,
    /// `elapsed` after the flow's first packet) leaves it. `extra` is a trace's delay for it.
    public mutating func delivery(packet: Int, arrival: Int64, elapsed: Int64, extra: Int64 = 0) -> Int64 {
        var sampled = delayNanoseconds &+ extra
        if jitterNanoseconds > 0 {
            sampled &+= Int64(distribution.sample(jitter: jitterNanoseconds, using: &random).rounded())
        }
        if let spike { sampled &+= spike.extraDelay(elapsed: elapsed) }
        var delivery = arrival &+ max(0, sampled)
        if !reorder { delivery = max(delivery, lastDelivery) }
        lastDelivery = max(lastDelivery, delivery)
        reorderCounter.record(packet: packet, arrival: arrival, delivery: delivery)
        packets += 1
        delays.record(nanoseconds: delivery - arrival)
        return delivery
    }

    public var report: DelayReport {
        DelayReport(packets: packets, reordered: reorderCounter.reordered, delay: delays)
    }
}

/// What a delay stage did: copies through it, how many were reordered, and their delays.
public struct DelayReport: Sendable {
    public var packets: Int
    /// Copies that arrived after a packet sent later (see ``ReorderCounter``).
    public var reordered: Int
    /// Delay of each copy through this stage, queueing behind earlier packets included.
    public var delay: DelayStatistics
}
