import ParleyWire

/// What a loop asks of the relay's rooms when a member joins, proves its address or leaves.
/// ``RelayCore`` serves it under its one lock; the loops know it by this and nothing more.
protocol RoomMembership: AnyObject, Sendable {
    func makeSessionID() -> UInt64
    /// Puts a joining session in its room. A session of the same identity that it replaces
    /// is out of the room when this returns, and its loop has been told to close it.
    func admit(_ session: Session, now: UInt64) -> RoomAdmission
    /// Makes a joining session active and tells the room; false if it was not joining.
    func activate(_ session: Session, now: UInt64) -> Bool
    /// Takes a session out of its room and tells the others.
    func remove(_ session: Session, now: UInt64)
    /// Sends the rosters held back by ``RosterSchedule`` whose time has come (every loop's tick).
    func publishDueRosters(now: UInt64)

    // Trunks to other relays (`RelayCore+Trunks.swift`).
    func attachTrunk(_ trunk: Trunk, now: UInt64) -> RoomAdmission
    func detachTrunk(_ trunk: Trunk, now: UInt64)
    func setRemoteMembers(
        _ roster: [ControlMessage.Roster.Member], streams: [RoomSnapshot.RemoteStream], of trunk: Trunk, localKey: [UInt8], now: UInt64
    ) -> [UInt32]
    /// Ends a trunk on its own loop, from any thread.
    func endTrunk(_ trunk: Trunk, reason: TrunkEndReason)
    /// The member's muted/deafened state changed; its room's roster says so at its next turn.
    func setState(_ state: ControlMessage.MemberState, of session: Session, now: UInt64)
    /// Hands a text from `session` to every other active member of its room that reads text,
    /// in one order for the whole room.
    func relayText(_ text: String, from session: Session)
    /// A text from a member behind `trunk`, to the members here.
    func relayText(_ text: String, sender: String, over trunk: Trunk)
    /// Whether `room` is end-to-end encrypted, or would be if a join whose token says
    /// `tokenAsks` opened it (what that join's `joined` tells it).
    func isEndToEndEncrypted(_ room: String, tokenAsks: Bool) -> Bool
    /// Sealed media keys from `session` to the members its entries name, here or behind a
    /// trunk; returns how many named nobody who can take them.
    func relayMediaKeys(_ entries: [ControlMessage.MediaKeys.Entry], from session: Session) -> Int
    /// Sealed media keys from the member `sender` behind `trunk`, to members here.
    func relayMediaKeys(_ entries: [ControlMessage.MediaKeys.Entry], from sender: UInt32, over trunk: Trunk) -> Int
    /// A moderator's request in `room` (server-mute, kick, close); `moderator` is the name
    /// a removed member is told.
    /// `passOn`: the request came from a member or the admin API here, so it also goes to the
    /// room's other relays over its trunks; false for one that came over a trunk.
    func moderate(_ request: ControlMessage.ModerationRequest, in room: String, by moderator: String, now: UInt64, passOn: Bool) -> ControlMessage.ModerationReply
}

enum RoomAdmission {
    case admitted(replaced: Session?)
    case refused(ControlMessage.ErrorCode, String)
}

/// The loop a session lives on, as the rooms see it: news for the session is handed over
/// from any thread and applied later on that loop's thread, in the order it was handed over.
protocol SessionLoop: AnyObject, Sendable {
    /// `roster` is empty when only the forwarding changes now and the roster follows later
    /// (``RosterSchedule``).
    func deliverRoomUpdate(_ session: Session, snapshot: RoomSnapshot, roster: [ControlMessage.Roster])
    /// Another loop admitted a new session with this one's identity.
    func deliverReplacement(_ session: Session)
    /// A new snapshot of a trunk's room, and the roster of the members here for the peer relay.
    func deliverTrunkUpdate(_ trunk: Trunk, snapshot: RoomSnapshot, version: UInt32, localRoster: [ControlMessage.Roster.Member])
    /// A member here lost its SSRC to a member on another relay (``Room/setRemoteMembers(_:trunkID:localKey:)``)
    /// and is out of the room: its loop sends it away to join again.
    func deliverEviction(_ session: Session)
    func deliverTrunkEnd(_ trunk: Trunk, reason: TrunkEndReason)
    /// A text for `session` from the member `sender`.
    func deliverText(_ session: Session, sender: String, text: String)
    /// A sealed media key for `session` from the member whose SSRC is `sender`.
    func deliverMediaKeys(_ session: Session, entry: ControlMessage.MediaKeys.Entry, from sender: UInt32)
    /// Sealed media keys from a member here, for members behind `trunk`.
    func deliverTrunkMediaKeys(_ trunk: Trunk, keys: ControlMessage.MediaKeys)
    /// A text from the member `sender` here, for the members behind `trunk`.
    func deliverTrunkText(_ trunk: Trunk, sender: String, text: String)
    /// A moderation asked for here, for the relay behind `trunk` to carry out on its members.
    func deliverTrunkModeration(_ trunk: Trunk, request: ControlMessage.ModerationRequest)
    /// The trunk's room was closed here: it forwards nothing more, and ends once the peer has
    /// acknowledged the moderations passed on to it (the close among them).
    func deliverTrunkClosing(_ trunk: Trunk)
    /// A moderator removed the member (kicked, or closed the room): it is already out of its
    /// room; its loop closes the session and tells it `message`.
    func deliverRemoval(_ session: Session, reason: RemovalReason, message: String)
}
