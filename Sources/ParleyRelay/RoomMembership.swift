import ParleyWire

/// What a loop asks of the relay's rooms when a leg comes, goes or speaks to its room.
/// ``RelayCore`` serves it under its one lock; the loops know it by this and nothing more.
protocol RoomMembership: AnyObject, Sendable {
    func makeLegID() -> UInt64
    /// Puts a leg in its room: a joining member (checked against the room's limits, SSRCs,
    /// bans and its identity's join budget) or an open trunk. A member of the same identity
    /// that it replaces is out of the room when this returns, and its loop has been told.
    func attach(_ leg: Leg, now: UInt64) -> RoomAdmission
    /// Takes a leg out of its room (and, for a trunk, the members it brought) and tells the others.
    func detach(_ leg: Leg, now: UInt64)
    /// Makes a joining member active and tells the room; false if it was not joining.
    func activate(_ member: MemberLeg, now: UInt64) -> Bool
    /// Sends the rosters held back by ``RosterSchedule`` whose time has come (every loop's tick).
    func publishDueRosters(now: UInt64)
    /// The member's muted/deafened state changed; its room's roster says so at its next turn.
    func setState(_ state: ControlMessage.MemberState, of member: MemberLeg, now: UInt64)
    /// The peer's members, as the roster it sent over `trunk` says (`RelayCore+Trunks.swift`):
    /// returns the SSRCs not admitted here.
    func setRemoteMembers(
        _ roster: [ControlMessage.Roster.Member], streams: [RoomSnapshot.RemoteStream], of trunk: TrunkLeg, localKey: [UInt8], now: UInt64
    ) -> [UInt32]
    /// Ends a trunk on its own loop, from any thread.
    func endTrunk(_ trunk: TrunkLeg, reason: TrunkEndReason)
    /// A text from the member `sender` that arrived over `leg`, to every other member of the
    /// room that reads text, in one order for the whole room: from a member here, to the
    /// members here and over each of the room's trunks; from a trunk, to the members here.
    func relayText(_ text: String, sender: String, over leg: Leg)
    /// Whether `room` is end-to-end encrypted, or would be if a join whose token says
    /// `tokenAsks` opened it (what that join's `joined` tells it).
    func isEndToEndEncrypted(_ room: String, tokenAsks: Bool) -> Bool
    /// Sealed media keys from the member whose SSRC is `sender`, which arrived over `leg`, to
    /// the members its entries name: here, or (from a member here) behind a trunk. Returns
    /// how many named nobody who can take them.
    func relayMediaKeys(_ entries: [ControlMessage.MediaKeys.Entry], from sender: UInt32, over leg: Leg) -> Int
    /// A moderator's request in `room` (server-mute, kick, close); `moderator` is the name
    /// a removed member is told.
    /// `passOn`: the request came from a member or the admin API here, so it also goes to the
    /// room's other relays over its trunks; false for one that came over a trunk.
    func moderate(_ request: ControlMessage.ModerationRequest, in room: String, by moderator: String, now: UInt64, passOn: Bool) -> ControlMessage.ModerationReply
}

enum RoomAdmission {
    case admitted(replaced: MemberLeg?)
    case refused(ControlMessage.ErrorCode, String)
}

/// What the rooms hand a leg's loop when the leg's room changes: the room's new forwarding
/// snapshot, and the roster as this kind of leg hears it (a member the whole room, a trunk
/// the members here), or none when only the forwarding changes now (``RosterSchedule``).
struct RoomUpdate: Sendable {
    let snapshot: RoomSnapshot
    let roster: RoomRoster?
}

/// How a leg ends when the rooms end it.
enum LegEnding: Sendable {
    /// A member taken out of its room (replaced by a new session of its identity, sent away
    /// over an SSRC clash, kicked, its room closed): it is told why, in `message`'s words
    /// when there are some.
    case removed(RemovalReason, message: String?)
    /// A trunk ends for `reason`.
    case trunkEnded(TrunkEndReason)
    /// A trunk's room was closed here: it forwards nothing more, and ends once the peer has
    /// acknowledged the moderations passed on to it (the close among them).
    case trunkClosing
}

/// The loop a leg lives on, as the rooms see it: news for a leg is handed over from any thread
/// and applied later on that loop's thread, in the order it was handed over.
protocol LegLoop: AnyObject, Sendable {
    func deliver(_ update: RoomUpdate, to leg: Leg)
    /// A text from the member `sender`, for the leg (a member, or the members behind a trunk).
    func deliverText(_ text: String, from sender: String, to leg: Leg)
    /// Sealed media keys from the member whose SSRC is `sender`, for the leg.
    func deliverMediaKeys(_ entries: [ControlMessage.MediaKeys.Entry], from sender: UInt32, to leg: Leg)
    /// A moderation asked for here, for the relay behind `trunk` to carry out on its members.
    func deliverModeration(_ request: ControlMessage.ModerationRequest, to trunk: TrunkLeg)
    func deliverEnding(_ ending: LegEnding, to leg: Leg)
}
