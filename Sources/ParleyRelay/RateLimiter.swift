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

/// Rate limits per source address in a fixed-size table, for answering strangers.
///
/// A table keyed by every address seen would let random source addresses grow memory
/// without bound; this one has `slotCount` buckets and an address shares its slot with
/// whatever hashes there, so memory is fixed and a flood from many addresses still gets
/// throttled. A global limiter caps the total on top.
struct SourceRateLimiter: Sendable {
    private var slots: [RateLimiter]
    private var global: RateLimiter
    private let seed: Int

    init(perSourcePerSecond: Int, globalPerSecond: Int, slotCount: Int = 4096, nowNanoseconds: UInt64) {
        slots = Array(repeating: RateLimiter(ratePerSecond: perSourcePerSecond, burst: max(1, perSourcePerSecond), nowNanoseconds: nowNanoseconds), count: slotCount)
        global = RateLimiter(ratePerSecond: globalPerSecond, burst: max(1, globalPerSecond / 4), nowNanoseconds: nowNanoseconds)
        seed = Int.random(in: .min ... .max)  // so a stranger cannot aim at another's slot
    }

    mutating func allow(_ address: PeerAddress, nowNanoseconds: UInt64) -> Bool {
        var hasher = Hasher()
        hasher.combine(seed)
        hasher.combine(address)
        let index = Int(UInt(bitPattern: hasher.finalize()) % UInt(slots.count))
        guard slots[index].allow(nowNanoseconds: nowNanoseconds) else { return false }
        return global.allow(nowNanoseconds: nowNanoseconds)
    }
}
