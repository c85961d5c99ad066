/// When each room's roster goes out: at once after a quiet spell, then at most once per
/// ``interval``, carrying every change made meanwhile.
///
/// A roster is reliable, so every member acknowledges each one; sent on every join and
/// leave, a token holder re-joining in a loop made the relay send thousands a second and the
/// members' acknowledgements crowd out their audio. Coalesced, a room costs at most a few
/// rosters a second however fast its membership churns, and a lone join is still announced
/// with no delay. Plain state with time passed in; ``RelayCore`` keeps one behind its lock.
struct RosterSchedule: Sendable {
    static let interval: UInt64 = 250_000_000

    private var lastSent: [String: UInt64] = [:]
    private var pending: Set<String> = []

    /// The room's membership changed at `now`: true when its roster should go out now, false
    /// when it is held for ``due(now:)``.
    mutating func roomChanged(_ room: String, now: UInt64) -> Bool {
        if let last = lastSent[room], now &- last < Self.interval, now >= last {
            pending.insert(room)
            return false
        }
        lastSent[room] = now
        pending.remove(room)
        return true
    }

    /// Rooms whose held roster is due at `now`; they count as sent.
    mutating func due(now: UInt64) -> [String] {
        guard !pending.isEmpty else { return [] }
        let ready = pending.filter { room in
            guard let last = lastSent[room] else { return true }
            return now < last || now - last >= Self.interval
        }
        for room in ready {
            pending.remove(room)
            lastSent[room] = now
        }
        return Array(ready)
    }

    var hasPending: Bool { !pending.isEmpty }

    /// The room closed: nothing more to send for it.
    mutating func roomClosed(_ room: String) {
        lastSent[room] = nil
        pending.remove(room)
    }
}
