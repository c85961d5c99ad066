import ParleyWire

/// Who was removed from which room, and until when they may not rejoin: one entry per
/// (room, identity), bounded in number, each forgotten when it runs out. Plain state with
/// time passed in; ``RelayCore`` keeps one behind its lock and checks every join against it.
///
/// The bound keeps a moderator kicking in a loop (or an operator's script gone wrong) from
/// growing the relay's memory: at ``capacity`` a new ban takes the place of the one closest
/// to running out, so the newest bans always hold.
struct KickList: Sendable {
    struct Ban: Sendable, Hashable {
        let until: UInt64
        /// Who removed the member: a moderator's identity, or "the relay's operator".
        let by: String
        let reason: String
    }

    private struct Key: Hashable {
        let room: String
        let identity: String
    }

    static let defaultCapacity = 10_000
    static let defaultBanSeconds = ControlMessage.ModerationRequest.defaultBanSeconds
    static let maximumBanSeconds = ControlMessage.ModerationRequest.maximumBanSeconds

    let capacity: Int
    private var bans: [Key: Ban] = [:]

    init(capacity: Int = Self.defaultCapacity) {
        self.capacity = max(1, capacity)
    }

    var count: Int { bans.count }

    /// The bans of `room` still running, for a relay that joins the room (a trunk opening).
    func bans(in room: String, now: UInt64) -> [(identity: String, ban: Ban)] {
        bans.compactMap { $0.key.room == room && now < $0.value.until ? ($0.key.identity, $0.value) : nil }
    }

    /// Keeps `identity` out of `room` for `seconds` from `now` (a later kick replaces an earlier one).
    mutating func ban(_ identity: String, from room: String, seconds: UInt32, by: String, reason: String, now: UInt64) {
        let key = Key(room: room, identity: identity)
        if bans[key] == nil, bans.count >= capacity {
            forgetExpired(now: now)
            if bans.count >= capacity, let soonest = bans.min(by: { $0.value.until < $1.value.until })?.key {
                bans[soonest] = nil
            }
        }
        let (until, overflow) = now.addingReportingOverflow(UInt64(seconds) * 1_000_000_000)
        bans[key] = Ban(until: overflow ? .max : until, by: by, reason: reason)
    }

    /// The ban that keeps `identity` out of `room` at `now`, if one does; an expired one is forgotten.
    mutating func ban(of identity: String, in room: String, now: UInt64) -> Ban? {
        let key = Key(room: room, identity: identity)
        guard let ban = bans[key] else { return nil }
        guard now < ban.until else {
            bans[key] = nil
            return nil
        }
        return ban
    }

    mutating func forgetExpired(now: UInt64) {
        bans = bans.filter { now < $0.value.until }
    }
}
