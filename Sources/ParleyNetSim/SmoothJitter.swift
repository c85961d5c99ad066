import Foundation

/// Normal jitter on a path that keeps its packets in order: a random delay curve whose
/// values have the configured standard deviation and which never falls faster than time
/// passes, so a packet sent later never arrives earlier.
///
/// Why a curve and not one sample per packet: a FIFO path cannot deliver independent
/// samples. Holding each packet behind the one ahead of it makes every packet wait for the
/// latest of its predecessors' samples, which raises the mean and narrows the spread the
/// more, the closer the packets: 30 ms ± 10 ms comes out as 36 ms ± 7 ms at 250 packets a
/// second and 39 ms ± 6.4 ms at 500.
/// On a real FIFO link the delay is a property of the moment (the queue a packet finds), so
/// packets sent close together have close delays, and the delay can fall no faster than
/// the queue drains. ITU-T G.1050 (2007) models access-link jitter the same way: a delay
/// value per millisecond, filtered, applied to each packet by the millisecond it arrives in,
/// arrival order kept.
///
/// The curve joins knots with straight lines. The knots are an Ornstein–Uhlenbeck process
/// sampled at random times, on average every `2 × jitter` (between 1.5 and 2.5 jitters
/// apart), with a time constant of four jitters: the curve forgets its past over about five
/// jitters (50 ms at 10 ms of jitter). The spacing varies so that packets sent at a fixed
/// interval do not keep meeting the curve at the same point between knots, where its
/// variance would differ from the average. Knots are scaled so that the joined curve's
/// variance, averaged over time, is the jitter squared (between knots Δ apart it is
/// (2 + e^−Δ/τ) / 3 of the knots'). A knot that would make the curve fall faster than time
/// passes is raised to the steepest allowed fall; that happens to one knot in fifty, and
/// moves the mean by about 1.5 % of the jitter. Knots are kept within ±6 standard
/// deviations (a one-in-10⁹ event), which bounds the curve, so a jump over a long silence
/// cannot reorder either.
///
/// Time is the delay stage's own (nanoseconds since the flow's first packet): the curve
/// does not depend on how many packets sample it, so 50 and 5,000 packets a second see the
/// same delays.
struct SmoothJitter: Sendable {
    /// Mean knot spacing, in jitters; each spacing is drawn within ±25 % of it.
    static let spacingPerJitter = 2.0
    static let spacingSpread = 0.25
    /// The knots' time constant, in jitters.
    static let timeConstantPerJitter = 4.0
    /// The largest knot, in standard deviations.
    static let largestKnot = 6.0
    /// After a silence longer than this many mean spacings, the curve starts again from a
    /// knot drawn over the whole silence instead of walking every knot in between.
    static let knotsWalkedOneByOne = 64.0

    /// Scales unit knots so that the joined curve's variance averages to one:
    /// 1 / √(E[Δ·(2 + e^−Δ/τ)] / (3·E[Δ])) for spacings Δ uniform in [(1 − s)·h, (1 + s)·h].
    static let curveScale: Double = {
        let (mean, spread, tau) = (spacingPerJitter, spacingSpread, timeConstantPerJitter)
        let (low, high) = (mean * (1 - spread), mean * (1 + spread))
        // ∫ x·e^(−x/τ) dx = −τ·e^(−x/τ)·(x + τ)
        let antiderivative = { (x: Double) in -tau * exp(-x / tau) * (x + tau) }
        let weightedCorrelation = (antiderivative(high) - antiderivative(low)) / (high - low)
        return 1 / ((2 + weightedCorrelation / mean) / 3).squareRoot()
    }()

    private let jitter: Double
    private let amplitude: Double
    private let timeConstant: Double
    private var random: SeededRandom
    /// The knots at either end of the current segment, and their times (nanoseconds).
    private var knot: Double
    private var knotTime: Double
    private var nextKnot: Double
    private var nextKnotTime: Double

    /// `jitter` in nanoseconds, above zero.
    init(jitter: Double, seed: UInt64) {
        precondition(jitter > 0, "smooth jitter needs a positive jitter")
        self.jitter = jitter
        amplitude = Self.curveScale * jitter
        timeConstant = Self.timeConstantPerJitter * jitter
        random = SeededRandom(seed: seed)
        (knot, knotTime, nextKnot, nextKnotTime) = (0, 0, 0, 0)
        // The flow's first packet lands at a random point of a segment, as any later one does.
        knot = Self.bounded(random.nextGaussian())
        knotTime = -random.nextUnitInterval() * Self.spacingPerJitter * jitter
        drawNextKnot()
    }

    /// The delay's deviation from its mean, in nanoseconds, for a packet reaching the delay
    /// stage `time` nanoseconds after the flow's first one. Times must not decrease.
    mutating func deviation(at time: Double) -> Double {
        if time - nextKnotTime > Self.knotsWalkedOneByOne * Self.spacingPerJitter * jitter {
            // The curve is bounded by ±6 standard deviations, far less than this silence.
            let correlation = exp(-(time - knotTime) / timeConstant)
            knot = Self.bounded(correlation * knot + (1 - correlation * correlation).squareRoot() * random.nextGaussian())
            knotTime = time - random.nextUnitInterval() * Self.spacingPerJitter * jitter
            drawNextKnot()
        }
        while nextKnotTime <= time {
            (knot, knotTime) = (nextKnot, nextKnotTime)
            drawNextKnot()
        }
        let fraction = (time - knotTime) / (nextKnotTime - knotTime)
        return amplitude * ((1 - fraction) * knot + fraction * nextKnot)
    }

    /// The next knot: the Ornstein–Uhlenbeck step over a random spacing, raised if the curve
    /// would fall faster than time passes.
    private mutating func drawNextKnot() {
        let spread = Self.spacingSpread * (2 * random.nextUnitInterval() - 1)
        let spacing = Self.spacingPerJitter * jitter * (1 + spread)
        let correlation = exp(-spacing / timeConstant)
        let drawn = correlation * knot + (1 - correlation * correlation).squareRoot() * random.nextGaussian()
        nextKnot = Self.bounded(max(drawn, knot - spacing / amplitude))
        nextKnotTime = knotTime + spacing
    }

    private static func bounded(_ value: Double) -> Double {
        min(max(value, -largestKnot), largestKnot)
    }
}
