/// How often each identity may join a room: ``RelayLimits/joinBurstPerIdentity`` joins at
/// once, then ``RelayLimits/joinsPerMinutePerIdentity``.
///
/// Every join of an identity replaces its previous session and changes the room's roster,
/// so one token used in a loop would churn the room for everyone in it. A person rejoining
/// after a network change or a restart needs a handful; a client refused here is told
/// `rateLimited` and tries again once its budget has refilled.
///
/// Keyed by room and identity, both from verified tokens. Entries whose bucket has refilled
/// are dropped when the table grows past ``capacity``, so it stays bounded.
struct IdentityJoinBudget: Sendable {
    private struct Key: Hashable, Sendable {
        let room: String
        let identity: String
    }

    private struct Entry: Sendable {
        var limiter: TokenBucket
        var lastJoinNanoseconds: UInt64
    }

    private var entries: [Key: Entry] = [:]
    private let burst: Int
    private let perMinute: Int
    let capacity: Int
    /// After this long without a join an identity's bucket is full again.
    private let refillNanoseconds: UInt64

    init(limits: RelayLimits) {
        burst = limits.joinBurstPerIdentity
        perMinute = limits.joinsPerMinutePerIdentity
        capacity = max(1_024, 2 * limits.maximumSessions)
        refillNanoseconds = UInt64(burst) * 60_000_000_000 / UInt64(max(1, perMinute)) + 1
    }

    /// Spends one of the identity's joins in `room`; false when it has none left.
    mutating func allow(identity: String, room: String, now: UInt64) -> Bool {
        let key = Key(room: room, identity: identity)
        if entries[key] == nil {
            if entries.count >= capacity { forgetRefilled(now: now) }
            // Tokens per second below one: count in joins per minute, a minute a "second".
            entries[key] = Entry(limiter: TokenBucket(ratePerSecond: perMinute, burst: burst, nowNanoseconds: now / 60), lastJoinNanoseconds: now)
        }
        entries[key]!.lastJoinNanoseconds = now
        return entries[key]!.limiter.allow(nowNanoseconds: now / 60)
    }

    private mutating func forgetRefilled(now: UInt64) {
        entries = entries.filter { now &- $0.value.lastJoinNanoseconds < refillNanoseconds }
    }

    var count: Int { entries.count }
}
