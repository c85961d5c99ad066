/// Decides which packets a path loses: independently, or in bursts.
///
/// **Independent** loss drops each packet with probability `rate`, regardless of the others.
///
/// **Burst** loss is a two-state Gilbert–Elliott chain. In the *good* state no packet is
/// lost; in the *bad* state every packet is lost (loss probability 1, so a burst of losses
/// is exactly a stay in the bad state; netem's `gemodel` with its default `1-h` = 100% and
/// `1-k` = 0%). Moving
/// from packet to packet, the chain leaves good for bad with probability `p` and bad for
/// good with probability `q`. A stay in the bad state lasts a geometric number of packets
/// with mean `1 / q`, and the chain spends `p / (p + q)` of its time there; so, for a loss
/// rate `r` and a mean burst length `b`:
///
///     q = 1 / b
///     p = r · q / (1 − r) = r / (b · (1 − r))
///
/// `p` cannot exceed 1, so bursts of mean length `b` allow a loss rate of at most
/// `b / (b + 1)` (with `b` = 1, at most one packet in two).
///
/// The chain starts in a state drawn from its stationary distribution, so the first packets
/// are not biased towards delivery.
public struct LossModel: Sendable {
    enum Kind: Sendable {
        case independent(rate: Double)
        case gilbertElliott(goodToBad: Double, badToGood: Double)
    }

    let kind: Kind
    private var random: SeededRandom
    private var inBadState = false
    public private(set) var report = LossReport()

    /// Independent loss with probability `rate` (0...1).
    public init(rate: Double, seed: UInt64) {
        precondition((0...1).contains(rate), "loss rate \(rate) outside 0...1; validate with Impairment.validate()")
        kind = .independent(rate: rate)
        random = SeededRandom(seed: seed)
    }

    /// Gilbert–Elliott burst loss averaging `rate` (0 ≤ rate ≤ b / (b + 1)) in bursts of mean
    /// length `meanBurstLength` (≥ 1) packets.
    public init(rate: Double, meanBurstLength: Double, seed: UInt64) {
        precondition(
            LossModel.isPossible(rate: rate, meanBurstLength: meanBurstLength),
            "loss \(rate) with bursts of \(meanBurstLength) is impossible; validate with Impairment.validate()")
        let badToGood = 1 / meanBurstLength
        let goodToBad = rate < 1 ? rate * badToGood / (1 - rate) : 1
        kind = .gilbertElliott(goodToBad: goodToBad, badToGood: badToGood)
        random = SeededRandom(seed: seed)
        inBadState = random.nextBernoulli(rate)
    }

    /// Whether a chain with this rate and burst length exists (see the type's comment).
    public static func isPossible(rate: Double, meanBurstLength: Double) -> Bool {
        meanBurstLength >= 1 && meanBurstLength.isFinite && rate >= 0 && rate <= maximumRate(meanBurstLength: meanBurstLength)
    }

    /// The highest loss rate bursts of this mean length can give: `b / (b + 1)`.
    public static func maximumRate(meanBurstLength: Double) -> Double {
        meanBurstLength / (meanBurstLength + 1)
    }

    /// Decides the fate of the next packet: `true` if it is lost.
    public mutating func losesNextPacket() -> Bool {
        let lost: Bool
        switch kind {
        case .independent(let rate):
            lost = random.nextBernoulli(rate)
        case .gilbertElliott(let goodToBad, let badToGood):
            lost = inBadState
            inBadState = inBadState ? !random.nextBernoulli(badToGood) : random.nextBernoulli(goodToBad)
        }
        report.record(lost: lost)
        return lost
    }
}

/// What a loss process did: packets seen and lost, and how the losses clustered.
public struct LossReport: Sendable, Equatable {
    public private(set) var packets = 0
    public private(set) var lost = 0
    /// Runs of consecutive losses (a single lost packet is a burst of one).
    public private(set) var bursts = 0
    public private(set) var longestBurst = 0
    private var currentBurst = 0

    public init() {}

    mutating func record(lost isLost: Bool) {
        packets += 1
        guard isLost else {
            currentBurst = 0
            return
        }
        lost += 1
        if currentBurst == 0 { bursts += 1 }
        currentBurst += 1
        longestBurst = max(longestBurst, currentBurst)
    }

    /// Lost packets over packets seen (0 when none were seen).
    public var lossRate: Double { packets == 0 ? 0 : Double(lost) / Double(packets) }

    /// Lost packets per run of consecutive losses (0 when nothing was lost).
    public var meanBurstLength: Double { bursts == 0 ? 0 : Double(lost) / Double(bursts) }

    /// Adds another report's counts (bursts are not joined across the two).
    public mutating func merge(_ other: LossReport) {
        packets += other.packets
        lost += other.lost
        bursts += other.bursts
        longestBurst = max(longestBurst, other.longestBurst)
    }
}
