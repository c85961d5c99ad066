import ParleyWire
import Synchronization

/// The relay's rooms, shared by every event loop.
///
/// Rooms live in one ``RoomDirectory`` behind one lock, taken only when a leg comes or goes
/// (join, ready, leave, timeout, a trunk opening or ending), a member's muted/deafened state
/// changes, a text or sealed media keys are relayed, or a moderator acts; never per packet. A
/// change builds the room's new ``RoomSnapshot`` and rosters and hands them to the loop of
/// every leg in the room, while still holding the lock, so each loop receives a room's
/// versions (and its texts) in order. Forwarding changes at once; a room whose membership
/// churns is sent its roster (a reliable message every member acknowledges) at most every
/// ``RosterSchedule/interval``, the loops' ticks sending what was held back. Joins are also
/// limited per identity (``IdentityJoinBudget``).
///
/// Members and trunks are both legs here: what a room hands on (snapshots, rosters, texts,
/// keys) goes to each leg the same way, and the one rule between them is the mesh's: what
/// arrives over a trunk goes to the members here only.
///
/// The loops reach the core as ``RoomMembership``, and the core reaches them as ``LegLoop``:
/// neither knows the other's concrete type.
final class RelayCore: RoomMembership {
    let metrics: RelayMetrics

    struct Rooms {
        var directory: RoomDirectory
        /// Once the relay is stopping, members hear goodbye, not rosters of a room emptying.
        var isShuttingDown = false
        /// Every leg in a room, members (joining or active) and trunks, by ID.
        var legs: [UInt64: Leg] = [:]
        var nextLegID: UInt64 = 1
        var joinBudget: IdentityJoinBudget
        var rosterSchedule = RosterSchedule()
        /// The streams each trunk brings, by trunk ID, as its loop last reported them.
        var trunkStreams: [UInt64: [RoomSnapshot.RemoteStream]] = [:]
        /// Who was kicked from which room, until when (``KickList``).
        var kicks = KickList()

        /// The room's trunks, in the order they were attached.
        func trunks(of room: Room) -> [TrunkLeg] {
            room.trunks.compactMap { legs[$0.trunkID] as? TrunkLeg }
        }
    }

    let rooms: Mutex<Rooms>
    /// By ``Leg/workerIndex``; set once, before any loop starts.
    private let loops: Mutex<[any LegLoop]>

    /// Rosters are paged to fit a datagram that crosses any path unfragmented.
    static let maximumRosterMessageSize = 1200

    init(limits: RelayLimits, metrics: RelayMetrics) {
        self.metrics = metrics
        self.rooms = Mutex(Rooms(directory: RoomDirectory(limits: limits), joinBudget: IdentityJoinBudget(limits: limits)))
        self.loops = Mutex([])
    }

    func attach(loops list: [any LegLoop]) {
        loops.withLock { $0 = list }
    }

    /// Lets go of the loops once they stopped. Each loop's worker holds the core, so until
    /// then the two keep each other alive, and with them each loop's epoll set and eventfd.
    /// Each is replaced by a loop that drops what it is handed (a late API call after
    /// shutdown, such as closing a trunk, reaches no stopped thread and traps on no index).
    func detachLoops() {
        loops.withLock { list in list = list.map { _ in StoppedLegLoop() } }
    }

    func makeLegID() -> UInt64 {
        rooms.withLock { rooms in
            defer { rooms.nextLegID += 1 }
            return rooms.nextLegID
        }
    }

    // MARK: Legs coming and going

    func attach(_ leg: Leg, now: UInt64) -> RoomAdmission {
        rooms.withLock { rooms in
            switch leg {
            case let member as MemberLeg: return admit(member, in: &rooms, now: now)
            case let trunk as TrunkLeg: return attach(trunk, in: &rooms, now: now)
            default: return .refused(.malformedRequest, "not a leg this relay knows")
            }
        }
    }

    private func admit(_ member: MemberLeg, in rooms: inout Rooms, now: UInt64) -> RoomAdmission {
        guard rooms.joinBudget.allow(identity: member.identity, room: member.room, now: now) else {
            return .refused(.rateLimited, "\(member.identity) joined \(member.room) too often in the last minute")
        }
        if let ban = rooms.kicks.ban(of: member.identity, in: member.room, now: now) {
            return .refused(.kickedFromRoom, ban.refusal(room: member.room, now: now))
        }
        let candidate = Room.Member(
            sessionID: member.id, identity: member.identity, ssrc: member.ssrc, canPublish: member.canPublish,
            capabilities: member.capabilities, identityKey: member.identityKey)
        switch rooms.directory.admit(candidate, to: member.room, endToEnd: member.isEndToEndEncrypted) {
        case let .refused(code, message):
            return .refused(code, message)
        case let .admitted(replacedMember):
            rooms.legs[member.id] = member
            var replaced: MemberLeg?
            if let replacedMember {
                replaced = rooms.legs.removeValue(forKey: replacedMember.sessionID) as? MemberLeg
                if replacedMember.isActive { roomChanged(member.room, in: &rooms, now: now) }
            }
            if let replaced { loop(replaced.workerIndex).deliverEnding(.removed(.replaced, message: nil), to: replaced) }
            updateGauges(rooms)
            return .admitted(replaced: replaced)
        }
    }

    func detach(_ leg: Leg, now: UInt64) {
        rooms.withLock { rooms in
            guard rooms.legs[leg.id] === leg else { return }
            rooms.legs[leg.id] = nil
            if leg is TrunkLeg {
                detachTrunk(leg.id, from: leg.room, in: &rooms, now: now)
            } else if let member = rooms.directory.remove(sessionID: leg.id, from: leg.room), member.isActive {
                roomChanged(leg.room, in: &rooms, now: now)
            }
            if rooms.directory[leg.room] == nil { rooms.rosterSchedule.roomClosed(leg.room) }
            updateGauges(rooms)
        }
    }

    func activate(_ member: MemberLeg, now: UInt64) -> Bool {
        rooms.withLock { rooms in
            guard rooms.directory.activate(sessionID: member.id, in: member.room) else { return false }
            // The member's loop (the caller) sets its state to active right after; the update
            // it is sent below runs later on the same loop, so it sees that. The new member
            // hears the room at once even when the others' update is held back.
            let everyone = rooms.rosterSchedule.roomChanged(member.room, now: now)
            publish(member.room, in: rooms, rosterTo: everyone ? .everyone : .only(member))
            updateGauges(rooms)
            return true
        }
    }

    func publishDueRosters(now: UInt64) {
        rooms.withLock { rooms in
            guard rooms.rosterSchedule.hasPending else { return }
            for room in rooms.rosterSchedule.due(now: now) { publish(room, in: rooms, rosterTo: .everyone) }
        }
    }

    func setState(_ state: ControlMessage.MemberState, of member: MemberLeg, now: UInt64) {
        rooms.withLock { rooms in
            guard rooms.legs[member.id] === member, rooms.directory.setState(state, sessionID: member.id, in: member.room) else { return }
            roomChanged(member.room, in: &rooms, now: now)
        }
    }

    func isEndToEndEncrypted(_ room: String, tokenAsks: Bool) -> Bool {
        rooms.withLock { $0.directory.isEndToEndEncrypted(room, tokenAsks: tokenAsks) }
    }

    // MARK: What legs tell their room

    func relayMediaKeys(_ entries: [ControlMessage.MediaKeys.Entry], from sender: UInt32, over leg: Leg) -> Int {
        rooms.withLock { rooms in
            guard !rooms.isShuttingDown, rooms.legs[leg.id] === leg, let room = rooms.directory[leg.room] else { return entries.count }
            // Over a trunk, only a member the trunk brings may send.
            if leg is TrunkLeg, room.trunks.first(where: { $0.trunkID == leg.id })?.members.contains(where: { $0.ssrc == sender }) != true {
                return entries.count
            }
            let list = loops.withLock { $0 }
            var undeliverable = 0
            var toLegs: [UInt64: (leg: Leg, entries: [ControlMessage.MediaKeys.Entry])] = [:]
            for entry in entries where entry.ssrc != sender {
                if let member = room.members.first(where: { $0.ssrc == entry.ssrc }), member.isActive,
                   member.capabilities.contains(.endToEndEncryption), let receiver = rooms.legs[member.sessionID] {
                    toLegs[receiver.id, default: (receiver, [])].entries.append(entry)
                } else if leg.forwardsToTrunks, let carrier = room.trunks.first(where: { $0.members.contains { $0.ssrc == entry.ssrc } }),
                          let trunk = rooms.legs[carrier.trunkID] {
                    toLegs[trunk.id, default: (trunk, [])].entries.append(entry)
                } else {
                    undeliverable += 1
                }
            }
            for (receiver, batch) in toLegs.values {
                list[receiver.workerIndex].deliverMediaKeys(batch, from: sender, to: receiver)
            }
            return undeliverable
        }
    }

    func relayText(_ text: String, sender: String, over leg: Leg) {
        rooms.withLock { rooms in
            guard !rooms.isShuttingDown, rooms.legs[leg.id] === leg, let room = rooms.directory[leg.room] else { return }
            // Handed over under the rooms' lock: every loop receives the room's texts in one order.
            let list = loops.withLock { $0 }
            for member in room.members where member.isActive && member.sessionID != leg.id && member.capabilities.contains(.textMessages) {
                guard let receiver = rooms.legs[member.sessionID] else { continue }
                list[receiver.workerIndex].deliverText(text, from: sender, to: receiver)
            }
            guard leg.forwardsToTrunks else { return }
            for trunk in rooms.trunks(of: room) {
                list[trunk.workerIndex].deliverText(text, from: sender, to: trunk)
            }
        }
    }

    // MARK: Rosters and snapshots

    /// The room's membership changed: its roster goes out now, or at its next turn.
    func roomChanged(_ room: String, in rooms: inout Rooms, now: UInt64) {
        let everyone = rooms.rosterSchedule.roomChanged(room, now: now)
        publish(room, in: rooms, rosterTo: everyone ? .everyone : .nobody)
    }

    func beginShutdown() {
        rooms.withLock { $0.isShuttingDown = true }
    }

    /// Who is sent the roster with a room's new forwarding snapshot.
    enum RosterAudience {
        case everyone
        /// A member just activated, while the others' roster is held back by the schedule.
        case only(MemberLeg)
        /// Held back: the forwarding changes now, the roster at the room's next turn.
        case nobody

        func includes(_ member: MemberLeg) -> Bool {
            switch self {
            case .everyone: return true
            case let .only(only): return only === member
            case .nobody: return false
            }
        }
    }

    /// Builds the room's forwarding snapshot and rosters and hands them to the loop of each
    /// active leg: the snapshot always (it costs no packet), the whole room's roster to the
    /// members in `audience`; each trunk gets the roster of the members here, always (the peer
    /// relay paces its own members' rosters, and a trunk sends only what changed).
    func publish(_ roomName: String, in rooms: borrowing Rooms, rosterTo audience: RosterAudience) {
        guard !rooms.isShuttingDown, let room = rooms.directory[roomName] else { return }
        let active = room.members.filter(\.isActive).compactMap { rooms.legs[$0.sessionID] as? MemberLeg }
        let trunks = rooms.trunks(of: room)
        let muted = room.serverMuted.isEmpty ? [] : Set(active.filter { room.serverMuted.contains($0.identity) }.map(\.id))
        let snapshot = RoomSnapshot(
            version: room.version, receivers: active.map(\.receiver) + trunks.map(\.receiver), serverMuted: muted,
            remoteStreams: trunks.flatMap { rooms.trunkStreams[$0.id] ?? [] }, remoteMemberCount: room.remoteMemberCount)
        let list = loops.withLock { $0 }
        var roster: RoomRoster?
        if case .nobody = audience {} else { roster = RoomRoster(version: room.version, members: room.roster) }
        for member in active {
            list[member.workerIndex].deliver(RoomUpdate(snapshot: snapshot, roster: audience.includes(member) ? roster : nil), to: member)
        }
        guard !trunks.isEmpty else { return }
        let localRoster = RoomRoster(version: room.version, members: room.localRoster)
        for trunk in trunks {
            list[trunk.workerIndex].deliver(RoomUpdate(snapshot: snapshot, roster: localRoster), to: trunk)
        }
    }

    /// The loops never change after start.
    func loop(_ index: Int) -> any LegLoop {
        loops.withLock { $0[index] }
    }

    func updateGauges(_ rooms: borrowing Rooms) {
        let counts = rooms.directory.memberCount
        metrics.rooms.record(rooms.directory.rooms.count)
        metrics.membersActive.record(counts.active)
        metrics.membersJoining.record(counts.joining)
        metrics.trunks.record(rooms.directory.trunkCount)
        metrics.membersRemote.record(rooms.directory.remoteMemberCount)
    }

    /// Rooms and their active members' identities, for logs and tests.
    var roomSummary: [String: [String]] {
        rooms.withLock { rooms in
            rooms.directory.rooms.mapValues { $0.members.filter(\.isActive).map(\.identity) }
        }
    }
}

/// What stands in for a stopped loop: there is nobody left to deliver to.
private final class StoppedLegLoop: LegLoop {
    func deliver(_ update: RoomUpdate, to leg: Leg) {}
    func deliverText(_ text: String, from sender: String, to leg: Leg) {}
    func deliverMediaKeys(_ entries: [ControlMessage.MediaKeys.Entry], from sender: UInt32, to leg: Leg) {}
    func deliverModeration(_ request: ControlMessage.ModerationRequest, to trunk: TrunkLeg) {}
    func deliverEnding(_ ending: LegEnding, to leg: Leg) {}
}
