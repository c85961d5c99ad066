import Foundation
import ParleyBasics

/// A small, fast, seeded random generator: xoshiro256** (Blackman and Vigna, 2018), seeded
/// through SplitMix64 as its authors recommend, so that nearby seeds (1, 2, 3…) still give
/// unrelated streams.
///
/// Every impairment model owns one, so a run is reproduced exactly by its seed, and turning
/// one model on or off never reshuffles another model's decisions (each stage derives its
/// own stream from the pipeline's seed with ``derivedSeed(_:_:)``).
public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var s0: UInt64
    private var s1: UInt64
    private var s2: UInt64
    private var s3: UInt64
    /// Box–Muller makes normal deviates in pairs; the second waits here for the next call.
    private var spareGaussian: Double?

    public init(seed: UInt64) {
        var mixer = seed
        s0 = SplitMix64.next(&mixer)
        s1 = SplitMix64.next(&mixer)
        s2 = SplitMix64.next(&mixer)
        s3 = SplitMix64.next(&mixer)
    }

    public mutating func next() -> UInt64 {
        let result = rotateLeft(s1 &* 5, 7) &* 9
        let t = s1 << 17
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = rotateLeft(s3, 45)
        return result
    }

    /// A uniform value in [0, 1) with 53 random bits (all a `Double` can hold).
    public mutating func nextUnitInterval() -> Double {
        Double(next() >> 11) * 0x1.0p-53
    }

    /// True with probability `probability` (0 never, 1 always).
    public mutating func nextBernoulli(_ probability: Double) -> Bool {
        nextUnitInterval() < probability
    }

    /// A standard normal deviate (mean 0, standard deviation 1), by the Box–Muller transform.
    public mutating func nextGaussian() -> Double {
        if let spare = spareGaussian {
            spareGaussian = nil
            return spare
        }
        // 1 - u lies in (0, 1], so the logarithm is finite.
        let radius = (-2 * log(1 - nextUnitInterval())).squareRoot()
        let angle = 2 * Double.pi * nextUnitInterval()
        spareGaussian = radius * sin(angle)
        return radius * cos(angle)
    }

    /// A Pareto (type I) deviate with minimum `scale` and tail index `shape`, by inverting
    /// its CDF: P(X > x) = (scale / x)^shape for x ≥ scale.
    public mutating func nextPareto(scale: Double, shape: Double) -> Double {
        scale / pow(1 - nextUnitInterval(), 1 / shape)
    }

    /// A seed for an independent stream, made from a base seed and any number of labels
    /// (a flow index, a direction, a stage), so that every stream is reproducible by the
    /// base seed alone and no two labelled streams coincide.
    public static func derivedSeed(_ base: UInt64, _ labels: UInt64...) -> UInt64 {
        var mixer = base
        var seed = SplitMix64.next(&mixer)
        for label in labels {
            mixer = seed ^ (label &* 0x9E37_79B9_7F4A_7C15)
            seed = SplitMix64.next(&mixer)
        }
        return seed
    }

    private func rotateLeft(_ x: UInt64, _ k: UInt64) -> UInt64 {
        (x << k) | (x >> (64 - k))
    }
}
