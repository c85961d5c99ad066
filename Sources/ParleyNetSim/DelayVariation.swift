/// How a path's delay varies around its mean: the jitter's process, chosen by its
/// distribution and by whether packets may overtake each other.
///
/// Either way the delays have the configured mean and standard deviation and the
/// distribution's shape; what differs is how a packet's delay relates to its neighbours'.
/// With reordering, every packet draws its own delay, independent of the others', so a
/// packet may overtake the one sent before it. Without, the delay is a process in time that
/// never falls faster than time passes (``SmoothJitter``, ``CrossTrafficQueue``), so the
/// path keeps its packets in order by construction and nobody has to wait for anybody.
enum DelayVariation: Sendable {
    case none
    case independentNormal(jitter: Double, random: SeededRandom)
    case independentQueueing(jitter: Double, random: SeededRandom)
    case smooth(SmoothJitter)
    case queue(CrossTrafficQueue)

    /// `jitter` in nanoseconds.
    init(jitter: Double, distribution: JitterDistribution, reorder: Bool, seed: UInt64) {
        guard jitter > 0 else {
            self = .none
            return
        }
        switch (distribution, reorder) {
        case (.normal, true): self = .independentNormal(jitter: jitter, random: SeededRandom(seed: seed))
        case (.pareto, true): self = .independentQueueing(jitter: jitter, random: SeededRandom(seed: seed))
        case (.normal, false): self = .smooth(SmoothJitter(jitter: jitter, seed: seed))
        case (.pareto, false): self = .queue(CrossTrafficQueue(jitter: jitter, seed: seed))
        }
    }

    /// The deviation from the mean delay, in nanoseconds, of a packet reaching the delay stage
    /// `time` nanoseconds after the flow's first packet. Times must not decrease.
    mutating func deviation(at time: Double) -> Double {
        switch self {
        case .none:
            return 0
        case .independentNormal(let jitter, var random):
            let value = jitter * random.nextGaussian()
            self = .independentNormal(jitter: jitter, random: random)
            return value
        case .independentQueueing(let jitter, var random):
            let wait = CrossTrafficQueue.stationaryWait(using: &random, jitter: jitter)
            self = .independentQueueing(jitter: jitter, random: random)
            return wait - CrossTrafficQueue.floorPerJitter * jitter
        case .smooth(var process):
            let value = process.deviation(at: time)
            self = .smooth(process)
            return value
        case .queue(var process):
            let value = process.deviation(at: time)
            self = .queue(process)
            return value
        }
    }
}
