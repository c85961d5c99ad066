/// One-way delay: a mean delay, jitter around it, recurring spikes, and any per-packet delay
/// a replayed trace adds; either on a path that keeps its packets in order (the default) or
/// on one where they may overtake each other (`reorder`).
///
/// Each packet's delay is `delay + jitter deviation + spike + trace delay`, clamped at zero.
/// `delay` and `jitter` are the mean and standard deviation of what the jitter gives, and
/// they hold with and without reordering: ``DelayVariation`` draws each packet's deviation
/// independently when packets may overtake, and follows a process that never falls faster
/// than time passes when they may not. So without spikes or a trace a FIFO path keeps its
/// order by itself.
///
/// Spikes and traces can still ask a packet to arrive before the one sent ahead of it (the
/// spike ends, a trace line is shorter). Without reordering such a packet waits for the one
/// ahead and leaves right behind it: after a spike the packets queued behind it drain at
/// once, at the link's line rate, and the path is back to its own delay for the next ones.
/// Those waits are counted (``DelayReport/heldBehind``); with jitter alone there are none.
public struct DelayModel: Sendable {
    public let delay: Duration
    public let jitter: Duration
    public let distribution: JitterDistribution
    public let reorder: Bool
    public let spike: DelaySpike?

    private let delayNanoseconds: Int64
    private var variation: DelayVariation
    private var lastDelivery = Int64.min
    private var reorderCounter = ReorderCounter()
    private var delays = DelayStatistics()
    private var packets = 0
    private var heldBehind = 0

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
        variation = DelayVariation(
            jitter: Double(jitter.nanoseconds), distribution: distribution, reorder: reorder, seed: seed)
    }

    /// When a copy of `packet` that reaches the delay stage at `arrival` (nanoseconds,
    /// `elapsed` after the flow's first packet) leaves it. `extra` is a trace's delay for it.
    public mutating func delivery(packet: Int, arrival: Int64, elapsed: Int64, extra: Int64 = 0) -> Int64 {
        var sampled = delayNanoseconds &+ extra
        sampled &+= Int64(variation.deviation(at: Double(elapsed)).rounded())
        if let spike { sampled &+= spike.extraDelay(elapsed: elapsed) }
        var delivery = arrival &+ max(0, sampled)
        if !reorder && delivery < lastDelivery {
            heldBehind += 1
            delivery = lastDelivery
        }
        lastDelivery = max(lastDelivery, delivery)
        reorderCounter.record(packet: packet, arrival: arrival, delivery: delivery)
        packets += 1
        delays.record(nanoseconds: delivery &- arrival)
        return delivery
    }

    public var report: DelayReport {
        DelayReport(packets: packets, reordered: reorderCounter.reordered, heldBehind: heldBehind, delay: delays)
    }
}

/// What a delay stage did: copies through it, how many were reordered, and their delays.
public struct DelayReport: Sendable {
    public var packets: Int
    /// Copies that arrived after a packet sent later (see ``ReorderCounter``).
    public var reordered: Int
    /// Copies on a FIFO path that would have overtaken the one ahead of them (behind a spike
    /// or a trace's longer delay) and left right after it instead.
    public var heldBehind: Int
    /// Delay of each copy through this stage, waits behind earlier packets included.
    public var delay: DelayStatistics
}
