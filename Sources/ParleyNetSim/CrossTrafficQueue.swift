import Foundation

/// Heavy-tailed (`pareto`) jitter: the wait in a bottleneck's queue that the flow shares
/// with bursts of other traffic, as on a busy Wi-Fi channel or an oversold host's uplink.
///
/// Bursts of cross traffic arrive at random (a Poisson process) and their sizes are
/// Pareto-distributed with tail index 1.5, within the 1–2 measured for real traffic's bursts
/// and transfers (Paxson and Floyd, "Wide-area traffic: the failure of Poisson modeling",
/// 1995; Crovella and Bestavros, 1997), up to 30 times the smallest. The link drains the queue at its line
/// rate: the wait falls by one second per second. Bursts keep the link busy half the time.
/// A packet's delay is the path's floor plus the wait it finds. This is an M/G/1 queue, so
/// the wait's mean and variance are known in closed form (Pollaczek–Khinchine and Takács):
///
///     E[W] = λ·E[B²] / (2(1 − ρ))        E[W²] = 2·E[W]² + λ·E[B³] / (3(1 − ρ))
///
/// and the burst size is scaled so that the wait's standard deviation is the configured
/// jitter; the floor sits E[W] below the configured mean delay. What a flow sees:
///
/// - half of its packets find the queue empty and arrive at the floor, 0.49 × jitter below
///   the mean delay;
/// - one in ten waits more than 1.2 × jitter beyond the mean, one in a hundred 4 ×, one in a
///   thousand 7 ×;
/// - none waits more than 10 × jitter: the queue holds no more, the way a router's buffer is
///   finite (what overflows is the cross traffic's loss, not ours). That cap moves the mean
///   and deviation by under 1 %.
///
/// The queue keeps order by construction: its wait never falls faster than time passes.
/// Used with reordering, each packet instead draws its own wait from the same distribution
/// (``stationaryWait(using:)``), as if every packet crossed its own busy link.
struct CrossTrafficQueue: Sendable {
    /// The Pareto tail index of burst sizes.
    static let burstShape = 1.5
    /// The largest burst, in smallest bursts.
    static let largestBurst = 30.0
    /// The share of time the cross traffic keeps the link busy (ρ).
    static let load = 0.5
    /// The longest wait, in jitters.
    static let longestWaitPerJitter = 10.0

    /// E[Bᵏ] for a burst whose smallest size is 1: ∫ k·x^(k−1)·P(B > x) dx.
    static func burstMoment(_ k: Double) -> Double {
        let (shape, largest) = (burstShape, largestBurst)
        return shape * (pow(largest, k - shape) - 1) / (k - shape) + pow(largest, k - shape)
    }

    /// The mean burst, in smallest bursts.
    static let meanBurst = burstMoment(1)
    /// Bursts per unit of time, the unit being the time the link takes to send the smallest.
    static let arrivalRate = load / meanBurst
    static let meanWait = arrivalRate * burstMoment(2) / (2 * (1 - load))
    static let waitDeviation = (meanWait * meanWait + arrivalRate * burstMoment(3) / (3 * (1 - load))).squareRoot()
    /// How far below the mean delay the floor sits, in jitters (0.487).
    static let floorPerJitter = meanWait / waitDeviation
    /// Gaps longer than this many mean gaps between bursts restart the queue from a fresh
    /// draw of its stationary distribution instead of playing every burst in between: the
    /// queue forgot its state long before, and the work per packet stays bounded however
    /// small the jitter or long the silence.
    static let burstsPlayedAtMost = 256.0

    /// The time the link takes to send the smallest burst, in nanoseconds.
    private let unit: Double
    private let longestWait: Double
    private var random: SeededRandom
    /// The queue's content (as time to drain it) just after the last burst arrived.
    private var workload: Double
    private var lastBurst: Double = 0
    private var nextBurst: Double

    /// `jitter` in nanoseconds, above zero.
    init(jitter: Double, seed: UInt64) {
        precondition(jitter > 0, "a queue needs a positive jitter")
        unit = jitter / Self.waitDeviation
        longestWait = Self.longestWaitPerJitter * jitter
        random = SeededRandom(seed: seed)
        workload = 0
        nextBurst = 0
        // A flow starts on a link already in its steady state, not on an empty one.
        workload = Self.stationaryWait(using: &random, jitter: jitter)
        nextBurst = gap()
    }

    /// The wait's deviation from its mean, in nanoseconds, for a packet reaching the queue
    /// `time` nanoseconds after the flow's first one. Times must not decrease.
    mutating func deviation(at time: Double) -> Double {
        if time - lastBurst > Self.burstsPlayedAtMost / Self.arrivalRate * unit {
            workload = Self.stationaryWait(using: &random, jitter: unit * Self.waitDeviation)
            lastBurst = time
            nextBurst = time + gap()
        }
        while nextBurst <= time {
            let drained = max(0, workload - (nextBurst - lastBurst))
            workload = min(drained + burst(), longestWait)
            lastBurst = nextBurst
            nextBurst += gap()
        }
        return max(0, workload - (time - lastBurst)) - Self.meanWait * unit
    }

    /// A wait drawn from the queue's stationary distribution, in nanoseconds, for a queue
    /// scaled to `jitter` nanoseconds: by Pollaczek–Khinchine, a geometric number of
    /// residual burst sizes (P(N = n) = (1 − ρ)·ρⁿ; residuals with density P(B > x) / E[B]).
    static func stationaryWait(using random: inout SeededRandom, jitter: Double) -> Double {
        let unit = jitter / waitDeviation
        var wait = 0.0
        while random.nextBernoulli(load) {
            wait += residualBurst(random.nextUnitInterval()) * unit
        }
        return min(wait, longestWaitPerJitter * jitter)
    }

    /// The inverse of the residual burst size's distribution, F(x) = ∫₀ˣ P(B > y) dy / E[B].
    private static func residualBurst(_ uniform: Double) -> Double {
        let area = uniform * meanBurst
        guard area >= 1 else { return area }
        let exponent = 1 - burstShape
        return min(pow(1 + (area - 1) * exponent, 1 / exponent), largestBurst)
    }

    /// The next burst's size, in nanoseconds.
    private mutating func burst() -> Double {
        min(pow(1 - random.nextUnitInterval(), -1 / Self.burstShape), Self.largestBurst) * unit
    }

    /// Time to the next burst, in nanoseconds.
    private mutating func gap() -> Double {
        -log(1 - random.nextUnitInterval()) / Self.arrivalRate * unit
    }
}
