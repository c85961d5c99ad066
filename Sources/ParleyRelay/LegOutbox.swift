import ParleyWire

/// The room's texts for one leg, delivered one at a time: the next goes once the leg
/// acknowledges the last (or ``ReliableSender`` gives it up), so a member — or a relay, for
/// the members behind a trunk — receives them in the order the room's lock put them, each
/// once, whatever the path loses or reorders. Text is rare enough that a round trip per
/// message costs nothing a person sees. Plain state; the leg's loop drives it.
struct TextOutbox: Sendable {
    /// Messages waiting for one leg: a room that writes faster than the leg acknowledges
    /// loses the oldest beyond this, counted.
    static let maximumQueued = 64

    private var queue: [(sender: String, text: String)] = []
    private var nextNumber: UInt32 = 1
    /// The sequence number of the message in flight.
    private(set) var inFlight: UInt32?

    /// Queues a message from `sender`; false when the queue was full and its oldest was dropped.
    mutating func enqueue(sender: String, text: String) -> Bool {
        queue.append((sender, text))
        guard queue.count > Self.maximumQueued else { return true }
        queue.removeFirst()
        return false
    }

    /// The next message to send, numbered, if none is in flight; it is in flight with
    /// `sequence` from now on.
    mutating func next(sequence: UInt32) -> ControlMessage.Text? {
        guard inFlight == nil, !queue.isEmpty else { return nil }
        let (sender, text) = queue.removeFirst()
        defer { nextNumber &+= 1 }
        inFlight = sequence
        return ControlMessage.Text(number: nextNumber, sender: sender, text: text)
    }

    /// The message in flight is done with: acknowledged, or given up.
    mutating func settled() { inFlight = nil }

    var hasQueued: Bool { !queue.isEmpty }
}

/// What one leg was last told of its room's roster: a member hears the whole room, a trunk the
/// members here; each page is sent reliably, and a roster whose pages the reliable sender gave
/// up is sent again for as long as the leg lives (a leg that missed it would otherwise know a
/// stale room until the next change).
struct RosterOutbox: Sendable {
    private(set) var members: [ControlMessage.Roster.Member]?
    private(set) var version: UInt32 = 0
    /// Sequences of the last roster's pages not yet acknowledged.
    private(set) var unacknowledgedPages: Set<UInt32> = []

    /// Whether `roster` is news for the leg: the first, or a newer version that reads otherwise.
    func wants(_ roster: RoomRoster) -> Bool {
        guard let members else { return true }
        return RoomSnapshot.isNewer(roster.version, than: version) && roster.members != members
    }

    mutating func sent(_ roster: RoomRoster, pageSequences: Set<UInt32>) {
        members = roster.members
        version = roster.version
        unacknowledgedPages = pageSequences
    }

    mutating func acknowledge(sequence: UInt32) {
        unacknowledgedPages.remove(sequence)
    }

    /// The roster to send again: pages of it are unacknowledged and the reliable sender has
    /// nothing left in flight, so it gave them up.
    func givenUp(reliable: ReliableSender) -> RoomRoster? {
        guard reliable.isEmpty, !unacknowledgedPages.isEmpty, let members else { return nil }
        return RoomRoster(version: version, members: members)
    }
}

/// A room's roster as one kind of leg hears it, paged once for all the legs that hear it.
struct RoomRoster: Sendable {
    let version: UInt32
    let members: [ControlMessage.Roster.Member]
    let pages: [ControlMessage.Roster]

    init(version: UInt32, members: [ControlMessage.Roster.Member]) {
        self.version = version
        self.members = members
        pages = ControlMessage.Roster.pages(version: version, members: members, maximumMessageSize: RelayCore.maximumRosterMessageSize)
    }
}

/// A sealed media key on its way to a leg: from the member whose SSRC is `sender`, for the
/// member `entry` names (the relay reads only these numbers; the key inside is sealed to
/// its recipient).
struct PendingMediaKey: Sendable {
    let sender: UInt32
    let entry: ControlMessage.MediaKeys.Entry
}
