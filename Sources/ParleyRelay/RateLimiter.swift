/// A token bucket: `rate` tokens a second, at most `burst` saved up. Each allowed event spends
/// one. Time is passed in (nanoseconds of any monotonic clock), so tests need no clock.
///
/// Integer arithmetic in nano-tokens keeps it exact and cheap on the per-packet path.
public struct RateLimiter: Sendable, Hashable {
    public let ratePerSecond: Int
    public let burst: Int
    /// Tokens, in units of 1e-9 token.
    private var nanoTokens: Int64
    private var lastRefillNanoseconds: UInt64

    public init(ratePerSecond: Int, burst: Int, nowNanoseconds: UInt64) {
        precondition(ratePerSecond > 0 && burst > 0, "a rate limiter needs a positive rate and burst")
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        nanoTokens = Int64(burst) * 1_000_000_000
        lastRefillNanoseconds = nowNanoseconds
    }

    /// Spends a token if one is there.
    public mutating func allow(nowNanoseconds: UInt64) -> Bool {
        if nowNanoseconds > lastRefillNanoseconds {
            let elapsed = min(nowNanoseconds - lastRefillNanoseconds, 3_600_000_000_000)
            let capacity = Int64(burst) * 1_000_000_000
            nanoTokens = min(capacity, nanoTokens + Int64(elapsed) * Int64(ratePerSecond))
            lastRefillNanoseconds = nowNanoseconds
        }
        guard nanoTokens >= 1_000_000_000 else { return false }
        nanoTokens -= 1_000_000_000
        return true
    }
}
