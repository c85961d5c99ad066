/// The shape of the delay's variation around its mean. Either shape delivers delays whose
/// mean is `delay` and whose standard deviation is `jitter`, with or without reordering
/// (see ``DelayVariation``); they differ in their tails.
public enum JitterDistribution: String, Sendable, CaseIterable {
    /// Normal (Gaussian): symmetric and thin-tailed. One packet in a thousand is more than
    /// 3.1 × jitter late. Needs a mean delay of at least twice the jitter, so that delays
    /// below zero (clamped) stay rare enough (2 %) not to move the mean or deviation.
    case normal
    /// Heavy-tailed: the wait in a queue shared with Pareto-sized bursts of other traffic
    /// (``CrossTrafficQueue``). Half the packets arrive at a floor 0.49 × jitter below the
    /// mean; one in a hundred is 4 × jitter late, one in a thousand 7 ×, none more than 9.5 ×.
    case pareto

    /// The smallest mean delay this shape can deliver without clamping delays at zero, in
    /// jitters.
    public var smallestDelayPerJitter: Double {
        switch self {
        case .normal: return 2
        case .pareto: return 0.5
        }
    }
}
