import ParleyWire

/// A room's membership and its rules, as plain values: who is in, who is still joining,
/// which SSRCs are taken, and the roster version. No sockets, no clock, no locks; the
/// `Relay` keeps rooms in a ``RoomDirectory`` behind one lock and turns each change into
/// roster messages and forwarding snapshots.
public struct Room: Sendable {
    public struct Member: Sendable, Hashable {
        public var sessionID: UInt64
        public var identity: String
        public var ssrc: UInt32
        public var canPublish: Bool
        /// What the member can receive (its join said), passed on in the roster.
        public var capabilities: ControlMessage.Capabilities
        /// Its identity key (empty: none), passed on in the roster.
        public var identityKey: [UInt8] = []
        /// False until the member proves its address with `ready`.
        public var isActive: Bool
        /// Muted, deafened, as the member said (paced by ``MemberStatePacer``).
        public var state: ControlMessage.MemberState = []

        public init(
            sessionID: UInt64, identity: String, ssrc: UInt32, canPublish: Bool, capabilities: ControlMessage.Capabilities = [],
            identityKey: [UInt8] = [], isActive: Bool = false
        ) {
            self.identityKey = identityKey
            self.sessionID = sessionID
            self.identity = identity
            self.ssrc = ssrc
            self.canPublish = canPublish
            self.capabilities = capabilities
            self.isActive = isActive
        }
    }

    /// The outcome of asking to join.
    public enum Admission: Sendable, Hashable {
        /// In, as a joining member; `replaced` had the same identity and is now out.
        case admitted(replaced: Member?)
        case refused(ControlMessage.ErrorCode, String)
    }

    public let name: String
    /// In order of joining, so rosters list people in the order they came.
    public internal(set) var members: [Member] = []
    /// The room's members on other relays, by the trunk that brings them (`Room+Trunks.swift`).
    public internal(set) var trunks: [TrunkMembers] = []
    /// Increases whenever the roster (the active members, here and behind trunks) changes.
    public internal(set) var version: UInt32 = 0
    /// Identities a moderator server-muted: their audio is dropped at the relay. Kept by
    /// identity for the room's life, so leaving and rejoining does not lift a mute.
    public private(set) var serverMuted: Set<String> = []
    /// Server-mutes a room keeps at most; each needs a member present when it is made.
    public static let maximumServerMuted = 1_024
    /// Whether the room is end-to-end encrypted: decided by the first member admitted here
    /// (its token's `e2ee` claim) and fixed for the room's life; nil until then (a room that
    /// only a trunk opened).
    public internal(set) var isEndToEndEncrypted: Bool?

    public init(name: String) { self.name = name }

    /// Why a join for a room that is (`endToEnd`) or is not end-to-end encrypted cannot come
    /// in, given whether its token asks for it and its client can take part; nil if it can.
    public static func endToEndProblem(room: String, endToEnd: Bool, tokenAsks: Bool, clientTakesPart: Bool) -> String? {
        if endToEnd && !clientTakesPart {
            return "room \(room) is end-to-end encrypted and this client cannot take part (it sent no identity key); update parley"
        }
        if !endToEnd && tokenAsks {
            return "your invite is for an end-to-end encrypted room, but room \(room) is already running without end-to-end encryption; "
                + "ask its owner for an invite made with --e2ee for a room that has it, or wait until the room is empty"
        }
        return nil
    }

    /// No member here and no trunk: the room can close.
    public var isEmpty: Bool { members.isEmpty && trunks.isEmpty }

    public func member(sessionID: UInt64) -> Member? { members.first { $0.sessionID == sessionID } }

    /// Admits `candidate` as a joining member, unless the room is full or its SSRC is taken.
    /// A member with the same identity is replaced (a client that restarted, or moved network).
    public mutating func admit(_ candidate: Member, maximumMembers: Int, endToEnd: Bool = false) -> Admission {
        if let decided = isEndToEndEncrypted, decided != endToEnd {
            // Another loop made the room in the other way since this join looked.
            return .refused(.endToEndEncryptionRequired, "room \(name) changed while you joined; join again")
        }
        let existing = members.firstIndex { $0.identity == candidate.identity }
        if let clash = members.first(where: { $0.ssrc == candidate.ssrc }), clash.identity != candidate.identity {
            return .refused(.ssrcInUse, "SSRC \(candidate.ssrc) is already used by another member of \(name)")
        }
        if remoteMember(ssrc: candidate.ssrc) != nil {
            return .refused(.ssrcInUse, "SSRC \(candidate.ssrc) is already used by a member of \(name) on another relay")
        }
        let others = members.count - (existing == nil ? 0 : 1)
        guard others < maximumMembers else {
            return .refused(.roomFull, "room \(name) is full (\(maximumMembers) members)")
        }
        var replaced: Member?
        if let existing {
            replaced = members.remove(at: existing)
            if replaced!.isActive { version &+= 1 }
        }
        var joining = candidate
        joining.isActive = false
        members.append(joining)
        isEndToEndEncrypted = endToEnd
        return .admitted(replaced: replaced)
    }

    /// Makes a joining member active; false if it is not in the room or already active.
    @discardableResult
    public mutating func activate(sessionID: UInt64) -> Bool {
        guard let index = members.firstIndex(where: { $0.sessionID == sessionID }), !members[index].isActive else { return false }
        members[index].isActive = true
        version &+= 1
        return true
    }

    /// Records a member's muted/deafened state; true when the roster changed (an active
    /// member's state is new), which makes a new version.
    @discardableResult
    public mutating func setState(_ state: ControlMessage.MemberState, sessionID: UInt64) -> Bool {
        guard let index = members.firstIndex(where: { $0.sessionID == sessionID }), members[index].state != state else { return false }
        members[index].state = state
        guard members[index].isActive else { return false }
        version &+= 1
        return true
    }

    /// Removes a member; returns it, or nil if it was not here.
    @discardableResult
    public mutating func remove(sessionID: UInt64) -> Member? {
        guard let index = members.firstIndex(where: { $0.sessionID == sessionID }) else { return nil }
        let member = members.remove(at: index)
        if member.isActive { version &+= 1 }
        return member
    }

    /// The active members here and on the other relays, as the roster tells the members here.
    public var roster: [ControlMessage.Roster.Member] {
        localRoster + trunks.flatMap { trunk in trunk.members.map { trunk.rosterEntry(of: $0) } }
    }

    /// The active members here only: what a trunk tells the other relays.
    public var localRoster: [ControlMessage.Roster.Member] {
        members.filter(\.isActive).map {
            ControlMessage.Roster.Member(ssrc: $0.ssrc, identity: $0.identity, canPublish: $0.canPublish, capabilities: $0.capabilities,
                                         isServerMuted: serverMuted.contains($0.identity), state: $0.state, identityKey: $0.identityKey)
        }
    }

    /// The member of this identity, joining or active.
    public func member(identity: String) -> Member? { members.first { $0.identity == identity } }

    /// Server-mutes or unmutes the member of `identity`; false if nobody of that identity is
    /// here or the room holds its most mutes. A change the roster shows bumps its version.
    public mutating func setServerMuted(_ identity: String, _ muted: Bool) -> Bool {
        guard let member = member(identity: identity) else { return false }
        if muted {
            guard serverMuted.count < Self.maximumServerMuted || serverMuted.contains(identity) else { return false }
            guard serverMuted.insert(identity).inserted else { return true }
        } else {
            guard serverMuted.remove(identity) != nil else { return true }
        }
        if member.isActive { version &+= 1 }
        return true
    }

    public var activeCount: Int { members.reduce(0) { $0 + ($1.isActive ? 1 : 0) } }
}

/// Every room of the relay, and the limit on how many there are.
public struct RoomDirectory: Sendable {
    public internal(set) var rooms: [String: Room] = [:]
    public let limits: RelayLimits
    /// Kept as members change, so counting costs nothing however many rooms there are.
    public internal(set) var memberCount: (active: Int, joining: Int) = (0, 0)
    /// Members of these rooms on other relays, and trunks to them, kept the same way (`Room+Trunks.swift`).
    public internal(set) var remoteMemberCount = 0
    public internal(set) var trunkCount = 0

    public init(limits: RelayLimits) { self.limits = limits }

    public subscript(name: String) -> Room? { rooms[name] }

    /// Whether `room` is end-to-end encrypted, or would be if a join whose token says
    /// `tokenAsks` opened it.
    public func isEndToEndEncrypted(_ room: String, tokenAsks: Bool) -> Bool {
        rooms[room]?.isEndToEndEncrypted ?? tokenAsks
    }

    /// Admits `candidate` to `room`, opening the room if the relay has space for one more.
    /// `endToEnd` is what the join was told the room is (``isEndToEndEncrypted(_:tokenAsks:)``).
    public mutating func admit(_ candidate: Room.Member, to room: String, endToEnd: Bool = false) -> Room.Admission {
        if rooms[room] == nil {
            guard rooms.count < limits.maximumRooms else {
                return .refused(.tooManyRooms, "the relay has its maximum of \(limits.maximumRooms) rooms open")
            }
            rooms[room] = Room(name: room)
        }
        let admission = rooms[room]!.admit(candidate, maximumMembers: limits.maximumMembersPerRoom, endToEnd: endToEnd)
        if case let .admitted(replaced) = admission {
            memberCount.joining += 1
            if let replaced { count(replaced, by: -1) }
        }
        return admission
    }

    mutating func count(_ member: Room.Member, by change: Int) {
        if member.isActive { memberCount.active += change } else { memberCount.joining += change }
    }

    /// Server-mutes or unmutes a member of `room`; false if there is no such member.
    public mutating func setServerMuted(_ identity: String, _ muted: Bool, in room: String) -> Bool {
        rooms[room]?.setServerMuted(identity, muted) ?? false
    }

    /// Takes every member out of `room` and closes it; returns who was in it.
    public mutating func close(_ room: String) -> [Room.Member] {
        guard let closed = rooms.removeValue(forKey: room) else { return [] }
        for member in closed.members { count(member, by: -1) }
        trunkCount -= closed.trunks.count
        remoteMemberCount -= closed.remoteMemberCount
        return closed.members
    }

    @discardableResult
    public mutating func activate(sessionID: UInt64, in room: String) -> Bool {
        guard rooms[room]?.activate(sessionID: sessionID) == true else { return false }
        memberCount.joining -= 1
        memberCount.active += 1
        return true
    }

    /// A member's new muted/deafened state; true when its room's roster changed.
    @discardableResult
    public mutating func setState(_ state: ControlMessage.MemberState, sessionID: UInt64, in room: String) -> Bool {
        rooms[room]?.setState(state, sessionID: sessionID) ?? false
    }

    /// Removes a member, closing its room when it was the last.
    @discardableResult
    public mutating func remove(sessionID: UInt64, from room: String) -> Room.Member? {
        guard let member = rooms[room]?.remove(sessionID: sessionID) else { return nil }
        count(member, by: -1)
        if rooms[room]!.isEmpty { rooms[room] = nil }
        return member
    }
}
