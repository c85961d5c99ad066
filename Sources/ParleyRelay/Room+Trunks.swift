import ParleyWire

/// A room that spans relays: the members other relays announce over their trunks, in the
/// roster beside the members here, and the rule that settles an SSRC two relays both gave out.
///
/// SSRC clashes across relays are settled by refusing, never by rewriting: the relay whose
/// public key sorts first keeps the SSRC, and the member on the other relay is sent away to
/// join again (a new join with a taken SSRC is refused with `ssrcInUse`, and the client picks
/// another at random). Every relay applies the same rule to the same two keys, so exactly one
/// side gives way without either asking. Rewriting SSRCs on a trunk would cost work on every
/// packet and every RTCP report, and would leave the two relays' members naming one talker
/// by two numbers; a clash of random 32-bit values is rare enough to cost one rejoin instead.
extension Room {
    /// The members one trunk brings: the other relay's active members, from its latest roster.
    public struct TrunkMembers: Sendable, Hashable {
        public var trunkID: UInt64
        /// The other relay's public key (raw bytes), which settles SSRC clashes.
        public var peerKey: [UInt8]
        public var members: [Member]
        /// SSRCs of those members a moderator on their relay server-muted (their relay drops
        /// their audio; the roster here says so, as theirs does).
        public var serverMuted: Set<UInt32> = []

        func rosterEntry(of member: Member) -> ControlMessage.Roster.Member {
            ControlMessage.Roster.Member(ssrc: member.ssrc, identity: member.identity, canPublish: member.canPublish,
                                         capabilities: member.capabilities, isServerMuted: serverMuted.contains(member.ssrc), state: member.state,
                                         identityKey: member.identityKey)
        }
    }

    /// What a trunk's roster changed here.
    public struct RemoteRosterOutcome: Sendable, Hashable {
        /// SSRCs of the peer's members not admitted here: a member of a relay with the
        /// lower key holds them. Their media is dropped here until the peer resolves it.
        public var refused: [UInt32] = []
        /// Members here who lost their SSRC to the peer's member and must join again.
        public var evicted: [Member] = []
    }

    func remoteMember(ssrc: UInt32) -> Member? {
        for trunk in trunks {
            if let member = trunk.members.first(where: { $0.ssrc == ssrc }) { return member }
        }
        return nil
    }

    /// The member of another relay with this identity, if any.
    func remoteMember(identity: String) -> Member? {
        for trunk in trunks {
            if let member = trunk.members.first(where: { $0.identity == identity }) { return member }
        }
        return nil
    }

    /// Every remote member, for counting listeners.
    public var remoteMemberCount: Int { trunks.reduce(0) { $0 + $1.members.count } }

    mutating func attachTrunk(id: UInt64, peerKey: [UInt8]) {
        guard !trunks.contains(where: { $0.trunkID == id }) else { return }
        trunks.append(TrunkMembers(trunkID: id, peerKey: peerKey, members: []))
        // A new version, so every loop takes the snapshot that includes the trunk.
        version &+= 1
    }

    /// Takes the trunk and its members out; true if the roster changed.
    @discardableResult
    mutating func detachTrunk(id: UInt64) -> Bool {
        guard let index = trunks.firstIndex(where: { $0.trunkID == id }) else { return false }
        let removed = trunks.remove(at: index)
        version &+= 1
        return !removed.members.isEmpty
    }

    /// Replaces what trunk `id` brings with `roster` (the peer's active members), settling SSRC
    /// clashes by key order (`localKey` is this relay's). The roster version moves on when
    /// anything changed.
    mutating func setRemoteMembers(_ roster: [ControlMessage.Roster.Member], trunkID id: UInt64, localKey: [UInt8]) -> RemoteRosterOutcome {
        guard let index = trunks.firstIndex(where: { $0.trunkID == id }) else { return RemoteRosterOutcome() }
        let peerKey = trunks[index].peerKey
        var outcome = RemoteRosterOutcome()
        var admitted: [Member] = []
        for entry in roster where !admitted.contains(where: { $0.ssrc == entry.ssrc }) {
            if let local = members.first(where: { $0.ssrc == entry.ssrc }) {
                if localKey.lexicographicallyPrecedes(peerKey) {
                    outcome.refused.append(entry.ssrc)
                    continue
                }
                outcome.evicted.append(local)
                members.removeAll { $0.sessionID == local.sessionID }
            }
            if let other = trunks.indices.first(where: { $0 != index && trunks[$0].members.contains { $0.ssrc == entry.ssrc } }) {
                if trunks[other].peerKey.lexicographicallyPrecedes(peerKey) {
                    outcome.refused.append(entry.ssrc)
                    continue
                }
                trunks[other].members.removeAll { $0.ssrc == entry.ssrc }
            }
            var member = Member(
                sessionID: id, identity: entry.identity, ssrc: entry.ssrc, canPublish: entry.canPublish,
                capabilities: entry.capabilities, identityKey: entry.identityKey, isActive: true)
            member.state = entry.state
            admitted.append(member)
        }
        let muted = Set(roster.filter(\.isServerMuted).map(\.ssrc))
        if admitted != trunks[index].members || muted != trunks[index].serverMuted || !outcome.evicted.isEmpty {
            trunks[index].members = admitted
            trunks[index].serverMuted = muted
            version &+= 1
        }
        return outcome
    }
}

extension RoomDirectory {
    /// Attaches a trunk to `room`, opening the room if the relay has space for one more.
    mutating func attachTrunk(id: UInt64, peerKey: [UInt8], to room: String) -> Room.Admission {
        if rooms[room] == nil {
            guard rooms.count < limits.maximumRooms else {
                return .refused(.tooManyRooms, "the relay has its maximum of \(limits.maximumRooms) rooms open")
            }
            rooms[room] = Room(name: room)
        }
        if !rooms[room]!.trunks.contains(where: { $0.trunkID == id }) { trunkCount += 1 }
        rooms[room]!.attachTrunk(id: id, peerKey: peerKey)
        return .admitted(replaced: nil)
    }

    /// Detaches a trunk, closing its room when nothing is left in it; true if the roster changed.
    @discardableResult
    mutating func detachTrunk(id: UInt64, from room: String) -> Bool {
        guard let before = rooms[room], before.trunks.contains(where: { $0.trunkID == id }) else { return false }
        trunkCount -= 1
        remoteMemberCount -= before.remoteMemberCount
        let changed = rooms[room]!.detachTrunk(id: id)
        remoteMemberCount += rooms[room]!.remoteMemberCount
        if rooms[room]!.isEmpty { rooms[room] = nil }
        return changed
    }

    mutating func setRemoteMembers(
        _ roster: [ControlMessage.Roster.Member], trunkID: UInt64, localKey: [UInt8], in room: String
    ) -> Room.RemoteRosterOutcome {
        guard let before = rooms[room] else { return Room.RemoteRosterOutcome() }
        let outcome = rooms[room]!.setRemoteMembers(roster, trunkID: trunkID, localKey: localKey)
        remoteMemberCount += rooms[room]!.remoteMemberCount - before.remoteMemberCount
        for member in outcome.evicted { count(member, by: -1) }
        return outcome
    }
}
