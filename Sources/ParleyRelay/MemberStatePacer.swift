import ParleyWire

/// A member's muted/deafened state at the relay: the newest the member sent, and what the
/// room has been told, which follows it at most ``perSecond`` times a second.
///
/// Each change the room is told costs a new roster for every member (coalesced per room by
/// ``RosterSchedule``, but still a rebuild under the rooms' lock). A client flipping its mute
/// a thousand times a second would make that the relay's whole work; paced per member, it
/// costs a few changes a second, and the room always ends at the member's latest state
/// (a change held back is applied at a later tick, never dropped). Plain state with time
/// passed in.
struct MemberStatePacer: Sendable {
    static let perSecond = 4
    static let burst = 8

    private var rate: TokenBucket
    private var revision: UInt32?
    /// The newest state the member sent.
    private(set) var requested: ControlMessage.MemberState = []
    /// The state the room has.
    private(set) var applied: ControlMessage.MemberState = []

    init(nowNanoseconds: UInt64) {
        rate = TokenBucket(ratePerSecond: Self.perSecond, burst: Self.burst, nowNanoseconds: nowNanoseconds)
    }

    /// Takes an update unless a newer revision came first; true when it was taken.
    mutating func receive(_ update: ControlMessage.MemberStateUpdate) -> Bool {
        if let revision, !RoomSnapshot.isNewer(update.revision, than: revision) { return false }
        revision = update.revision
        requested = update.state
        return true
    }

    /// The state the room should be told now: the requested one, when it differs from what
    /// the room has and the member's rate allows; it counts as applied from here on.
    mutating func due(nowNanoseconds now: UInt64) -> ControlMessage.MemberState? {
        guard requested != applied, rate.allow(nowNanoseconds: now) else { return nil }
        applied = requested
        return applied
    }

    /// A change is waiting for the member's rate.
    var isHeldBack: Bool { requested != applied }
}
