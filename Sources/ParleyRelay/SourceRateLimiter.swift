/// Rate limits per source (``SourceHost``: an IPv4 address or an IPv6 /64) in a fixed-size
/// table, with a limit over all sources on top.
///
/// A table keyed by every source seen would let random source addresses grow memory
/// without bound; this one has `slotCount` buckets and a source shares its slot with
/// whatever hashes there, so memory is fixed and a flood from many addresses still gets
/// throttled. The hash is seeded per process, so a stranger cannot aim at another's slot.
struct SourceRateLimiter: Sendable {
    private var slots: [TokenBucket]
    private var global: TokenBucket
    private let seed: Int

    init(perSourcePerSecond: Int, perSourceBurst: Int? = nil, globalPerSecond: Int, slotCount: Int = 4096, nowNanoseconds: UInt64) {
        let burst = perSourceBurst ?? max(1, perSourcePerSecond)
        slots = Array(repeating: TokenBucket(ratePerSecond: perSourcePerSecond, burst: burst, nowNanoseconds: nowNanoseconds), count: slotCount)
        global = TokenBucket(ratePerSecond: globalPerSecond, burst: max(1, globalPerSecond / 4), nowNanoseconds: nowNanoseconds)
        seed = Int.random(in: .min ... .max)
    }

    /// Spends one event of `host`'s budget and one of the global budget, if both have one.
    mutating func allow(_ host: SourceHost, nowNanoseconds: UInt64) -> Bool {
        var hasher = Hasher()
        hasher.combine(seed)
        hasher.combine(host)
        let index = Int(UInt(bitPattern: hasher.finalize()) % UInt(slots.count))
        guard slots[index].allow(nowNanoseconds: nowNanoseconds) else { return false }
        return global.allow(nowNanoseconds: nowNanoseconds)
    }
}
