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
