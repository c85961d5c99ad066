/// A token bucket: `rate` tokens a second, at most `burst` saved up. Each allowed event spends
/// one (or `cost`). Time is passed in (nanoseconds of any monotonic clock), so tests need no clock.
///
/// Integer arithmetic in nano-tokens keeps it exact and cheap on the per-packet path.
public struct TokenBucket: Sendable, Hashable {
    public let ratePerSecond: Int
    public let burst: Int
    /// Tokens, in units of 1e-9 token.
    private var nanoTokens: Int64
    private var lastRefillNanoseconds: UInt64
    /// The time it takes to refill the whole burst: a longer silence refills no more, and
    /// counting only this much keeps `elapsed × rate` far from overflowing.
    private let refillNanoseconds: UInt64

    public init(ratePerSecond: Int, burst: Int, nowNanoseconds: UInt64) {
        precondition(ratePerSecond > 0 && burst > 0, "a token bucket needs a positive rate and burst")
        precondition(burst <= Int(Int64.max / 2_000_000_000), "a token bucket's burst must fit in nano-tokens")
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        nanoTokens = Int64(burst) * 1_000_000_000
        lastRefillNanoseconds = nowNanoseconds
        refillNanoseconds = UInt64(burst) * 1_000_000_000 / UInt64(ratePerSecond) + 1
    }

    /// Spends a token if one is there.
    public mutating func allow(nowNanoseconds: UInt64) -> Bool {
        allow(cost: 1, nowNanoseconds: nowNanoseconds)
    }

    /// Spends `cost` tokens (bytes, for a byte budget) if that many are there.
    public mutating func allow(cost: Int, nowNanoseconds: UInt64) -> Bool {
        if nowNanoseconds > lastRefillNanoseconds {
            let elapsed = min(nowNanoseconds - lastRefillNanoseconds, refillNanoseconds)
            let capacity = Int64(burst) * 1_000_000_000
            nanoTokens = min(capacity, nanoTokens + Int64(elapsed) * Int64(ratePerSecond))
            lastRefillNanoseconds = nowNanoseconds
        }
        let needed = Int64(clamping: max(0, cost)).multipliedReportingOverflow(by: 1_000_000_000)
        guard !needed.overflow, nanoTokens >= needed.partialValue else { return false }
        nanoTokens -= needed.partialValue
        return true
    }
}
