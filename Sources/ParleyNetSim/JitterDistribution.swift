import Foundation

/// The shape of delay variation around the mean delay. Both shapes have the configured
/// mean (`delay`) and standard deviation (`jitter`); they differ in their tails.
public enum JitterDistribution: String, Sendable, CaseIterable {
    /// Normal (Gaussian): symmetric, thin-tailed. Delays that would fall below zero are
    /// clamped to zero, which matters only when the jitter exceeds a third of the delay.
    case normal
    /// Pareto (heavy-tailed), the way queueing behind bursts of cross traffic looks: most
    /// packets arrive a little early, a few very late. The variation is a Pareto variable of
    /// tail index 2.5 minus its mean, scaled to the configured standard deviation, so delays
    /// never fall more than 0.45 × jitter below the mean, while one packet in a thousand is
    /// later than the mean by 9.5 × jitter (with a normal jitter: 3.1 ×).
    case pareto

    /// The Pareto tail index: above 2 for a finite standard deviation, low for a heavy tail.
    static let paretoShape = 2.5
    /// Pareto scale for a unit standard deviation: σ = scale / (α − 1) · √(α / (α − 2)).
    static let paretoScalePerDeviation = (paretoShape - 1) / (paretoShape / (paretoShape - 2)).squareRoot()
    /// The Pareto variable's mean for that scale: scale · α / (α − 1).
    static let paretoMeanPerDeviation = paretoScalePerDeviation * paretoShape / (paretoShape - 1)

    /// A deviation from the mean delay for a standard deviation of `jitter` nanoseconds.
    func sample(jitter: Double, using random: inout SeededRandom) -> Double {
        switch self {
        case .normal:
            return jitter * random.nextGaussian()
        case .pareto:
            let scale = Self.paretoScalePerDeviation
            return jitter * (random.nextPareto(scale: scale, shape: Self.paretoShape) - Self.paretoMeanPerDeviation)
        }
    }
}
