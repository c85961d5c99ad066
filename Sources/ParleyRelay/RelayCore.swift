import ParleyWire
import Synchronization

/// The relay's rooms, shared by every event loop.
///
/// Rooms live in one ``RoomDirectory`` behind one lock, taken only when membership changes
/// (join, ready, leave, timeout), a member's muted/deafened state changes, or a text is
/// relayed; never per packet. A change builds the room's new ``RoomSnapshot`` and roster and
/// hands them to the loop of every member, while still holding the lock, so each loop
/// receives a room's versions (and its texts) in order. Forwarding changes
/// at once; a room whose membership churns is sent its roster (a reliable message every
/// member acknowledges) at most every ``RosterSchedule/interval``, the loops' ticks sending
/// what was held back. Joins are also limited per identity (``IdentityJoinBudget``).
///
/// The loops reach the core as ``RoomMembership``, and the core reaches them as
/// ``SessionLoop``: neither knows the other's concrete type.
final class RelayCore: RoomMembership {
    let metrics: RelayMetrics

    struct Rooms {
        var directory: RoomDirectory
        /// Once the relay is stopping, members hear goodbye, not rosters of a room emptying.
        var isShuttingDown = false
        var sessions: [UInt64: Session] = [:]
        var nextSessionID: UInt64 = 1
        var joinBudget: IdentityJoinBudget
        var rosterSchedule = RosterSchedule()
        /// Each room's trunks to other relays (`RelayCore+Trunks.swift`).
        var trunks: [String: [Trunk]] = [:]
        /// The streams each trunk brings, by trunk ID, as its loop last reported them.
        var trunkStreams: [UInt64: [RoomSnapshot.RemoteStream]] = [:]
        /// Who was kicked from which room, until when (``KickList``).
        var kicks = KickList()
    }

    let rooms: Mutex<Rooms>
    /// By ``Session/workerIndex``; set once, before any loop starts.
    private let loops: Mutex<[any SessionLoop]>

    /// Rosters are paged to fit a datagram that crosses any path unfragmented.
    static let maximumRosterMessageSize = 1200

    init(limits: RelayLimits, metrics: RelayMetrics) {
        self.metrics = metrics
        self.rooms = Mutex(Rooms(directory: RoomDirectory(limits: limits), joinBudget: IdentityJoinBudget(limits: limits)))
        self.loops = Mutex([])
    }

    func attach(loops list: [any SessionLoop]) {
        loops.withLock { $0 = list }
    }

    /// Lets go of the loops once they stopped. Each loop's worker holds the core, so until
    /// then the two keep each other alive, and with them each loop's epoll set and eventfd.
    /// Each is replaced by a loop that drops what it is handed (a late API call after
    /// shutdown, such as closing a trunk, reaches no stopped thread and traps on no index).
    func detachLoops() {
        loops.withLock { list in list = list.map { _ in StoppedSessionLoop() } }
    }

    func makeSessionID() -> UInt64 {
        rooms.withLock { rooms in
            defer { rooms.nextSessionID += 1 }
            return rooms.nextSessionID
        }
    }

    func admit(_ session: Session, now: UInt64) -> RoomAdmission {
        rooms.withLock { rooms in
            guard rooms.joinBudget.allow(identity: session.identity, room: session.room, now: now) else {
                return .refused(.rateLimited, "\(session.identity) joined \(session.room) too often in the last minute")
            }
            if let ban = rooms.kicks.ban(of: session.identity, in: session.room, now: now) {
                return .refused(.kickedFromRoom, ban.refusal(room: session.room, now: now))
            }
            let candidate = Room.Member(
                sessionID: session.id, identity: session.identity, ssrc: session.ssrc, canPublish: session.canPublish,
                capabilities: session.capabilities, identityKey: session.identityKey)
            switch rooms.directory.admit(candidate, to: session.room, endToEnd: session.isEndToEndEncrypted) {
            case let .refused(code, message):
                return .refused(code, message)
            case let .admitted(replacedMember):
                rooms.sessions[session.id] = session
                var replaced: Session?
                if let replacedMember {
                    replaced = rooms.sessions.removeValue(forKey: replacedMember.sessionID)
                    if replacedMember.isActive { roomChanged(session.room, in: &rooms, now: now) }
                }
                if let replaced { loop(replaced.workerIndex).deliverReplacement(replaced) }
                updateGauges(rooms)
                return .admitted(replaced: replaced)
            }
        }
    }

    func activate(_ session: Session, now: UInt64) -> Bool {
        rooms.withLock { rooms in
            guard rooms.directory.activate(sessionID: session.id, in: session.room) else { return false }
            // The session's loop (the caller) sets its state to active right after; the
            // update it is sent below runs later on the same loop, so it sees that. The new
            // member hears the room at once even when the others' update is held back.
            let everyone = rooms.rosterSchedule.roomChanged(session.room, now: now)
            publish(session.room, in: rooms, rosterTo: everyone ? .everyone : .only(session))
            updateGauges(rooms)
            return true
        }
    }

    func remove(_ session: Session, now: UInt64) {
        rooms.withLock { rooms in
            guard rooms.sessions[session.id] === session else { return }
            rooms.sessions[session.id] = nil
            if let member = rooms.directory.remove(sessionID: session.id, from: session.room), member.isActive {
                roomChanged(session.room, in: &rooms, now: now)
            }
            if rooms.directory[session.room] == nil { rooms.rosterSchedule.roomClosed(session.room) }
            updateGauges(rooms)
        }
    }

    func publishDueRosters(now: UInt64) {
        rooms.withLock { rooms in
            guard rooms.rosterSchedule.hasPending else { return }
            for room in rooms.rosterSchedule.due(now: now) { publish(room, in: rooms, rosterTo: .everyone) }
        }
    }

    func setState(_ state: ControlMessage.MemberState, of session: Session, now: UInt64) {
        rooms.withLock { rooms in
            guard rooms.sessions[session.id] === session,
                  rooms.directory.setState(state, sessionID: session.id, in: session.room) else { return }
            roomChanged(session.room, in: &rooms, now: now)
        }
    }

    func isEndToEndEncrypted(_ room: String, tokenAsks: Bool) -> Bool {
        rooms.withLock { $0.directory.isEndToEndEncrypted(room, tokenAsks: tokenAsks) }
    }

    /// Sealed media keys from `session` to other members of its room: each entry goes to the
    /// member its SSRC names, here or over the trunk that brings it. Members that take no part
    /// in end-to-end encryption, and SSRCs not in the room, are skipped (and counted).
    func relayMediaKeys(_ entries: [ControlMessage.MediaKeys.Entry], from session: Session) -> Int {
        rooms.withLock { rooms in
            guard !rooms.isShuttingDown, rooms.sessions[session.id] === session,
                  let room = rooms.directory[session.room] else { return entries.count }
            return route(entries, from: session.ssrc, in: room, overTrunks: rooms.trunks[session.room] ?? [], rooms: rooms)
        }
    }

    /// Sealed media keys that came over `trunk` from a member of the peer relay: to the members
    /// here only (each relay of a room sends its members' keys straight to every other).
    func relayMediaKeys(_ entries: [ControlMessage.MediaKeys.Entry], from sender: UInt32, over trunk: Trunk) -> Int {
        rooms.withLock { rooms in
            guard !rooms.isShuttingDown, rooms.trunks[trunk.room]?.contains(where: { $0 === trunk }) == true,
                  let room = rooms.directory[trunk.room],
                  // Only a member the trunk brings may send over it.
                  room.trunks.first(where: { $0.trunkID == trunk.id })?.members.contains(where: { $0.ssrc == sender }) == true
            else { return entries.count }
            return route(entries, from: sender, in: room, overTrunks: [], rooms: rooms)
        }
    }

    /// Hands each entry to its recipient's loop; returns how many had nowhere to go.
    private func route(_ entries: [ControlMessage.MediaKeys.Entry], from sender: UInt32, in room: Room, overTrunks trunks: [Trunk],
                       rooms: Rooms) -> Int {
        let list = loops.withLock { $0 }
        var undeliverable = 0
        var overTrunk: [ObjectIdentifier: (trunk: Trunk, entries: [ControlMessage.MediaKeys.Entry])] = [:]
        for entry in entries where entry.ssrc != sender {
            if let member = room.members.first(where: { $0.ssrc == entry.ssrc }), member.isActive,
               member.capabilities.contains(.endToEndEncryption), let receiver = rooms.sessions[member.sessionID] {
                list[receiver.workerIndex].deliverMediaKeys(receiver, entry: entry, from: sender)
            } else if let carrier = room.trunks.first(where: { $0.members.contains { $0.ssrc == entry.ssrc } }),
                      let trunk = trunks.first(where: { $0.id == carrier.trunkID }) {
                overTrunk[ObjectIdentifier(trunk), default: (trunk, [])].entries.append(entry)
            } else {
                undeliverable += 1
            }
        }
        for (trunk, batch) in overTrunk.values {
            list[trunk.workerIndex].deliverTrunkMediaKeys(trunk, keys: ControlMessage.MediaKeys(sender: sender, entries: batch))
        }
        return undeliverable
    }

    /// A member's text to everyone else in its room: the members here, and over each of the
    /// room's trunks the members of the other relays.
    func relayText(_ text: String, from session: Session) {
        rooms.withLock { rooms in
            guard !rooms.isShuttingDown, rooms.sessions[session.id] === session else { return }
            deliver(text, sender: session.identity, in: session.room, except: session.id, rooms: &rooms)
            let list = loops.withLock { $0 }
            for trunk in rooms.trunks[session.room] ?? [] {
                list[trunk.workerIndex].deliverTrunkText(trunk, sender: session.identity, text: text)
            }
        }
    }

    /// A text that came over `trunk` from a member of the peer relay: to the members here only
    /// (the relays of a room are a full mesh, so the sender's relay sent it to every other).
    func relayText(_ text: String, sender: String, over trunk: Trunk) {
        rooms.withLock { rooms in
            guard !rooms.isShuttingDown, rooms.trunks[trunk.room]?.contains(where: { $0 === trunk }) == true else { return }
            deliver(text, sender: sender, in: trunk.room, except: nil, rooms: &rooms)
        }
    }

    /// Handed over under the rooms' lock: every loop receives the room's texts in one order.
    private func deliver(_ text: String, sender: String, in roomName: String, except excluded: UInt64?, rooms: inout Rooms) {
        guard let room = rooms.directory[roomName] else { return }
        let list = loops.withLock { $0 }
        for member in room.members where member.isActive && member.sessionID != excluded && member.capabilities.contains(.textMessages) {
            guard let receiver = rooms.sessions[member.sessionID] else { continue }
            list[receiver.workerIndex].deliverText(receiver, sender: sender, text: text)
        }
    }

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
        case only(Session)
        /// Held back: the forwarding changes now, the roster at the room's next turn.
        case nobody

        func includes(_ session: Session) -> Bool {
            switch self {
            case .everyone: return true
            case let .only(member): return member === session
            case .nobody: return false
            }
        }
    }

    /// Builds the room's forwarding snapshot and roster and hands them to each active member's
    /// loop: the snapshot always (it costs no packet), the roster to `audience`. Each trunk of
    /// the room gets the snapshot and the roster of the members here, always: the peer relay
    /// paces its own members' rosters.
    func publish(_ roomName: String, in rooms: borrowing Rooms, rosterTo audience: RosterAudience) {
        guard !rooms.isShuttingDown, let room = rooms.directory[roomName] else { return }
        let active = room.members.filter(\.isActive).compactMap { rooms.sessions[$0.sessionID] }
        let trunks = rooms.trunks[roomName] ?? []
        let muted = room.serverMuted.isEmpty ? [] : Set(active.filter { room.serverMuted.contains($0.identity) }.map(\.id))
        let snapshot = RoomSnapshot(
            version: room.version, receivers: active.map(\.receiver) + trunks.map(\.receiver), serverMuted: muted,
            remoteStreams: trunks.flatMap { rooms.trunkStreams[$0.id] ?? [] }, remoteMemberCount: room.remoteMemberCount)
        let roster = ControlMessage.Roster.pages(version: room.version, members: room.roster, maximumMessageSize: Self.maximumRosterMessageSize)
        let list = loops.withLock { $0 }
        for session in active {
            list[session.workerIndex].deliverRoomUpdate(session, snapshot: snapshot, roster: audience.includes(session) ? roster : [])
        }
        guard !trunks.isEmpty else { return }
        let localRoster = room.localRoster
        for trunk in trunks {
            list[trunk.workerIndex].deliverTrunkUpdate(trunk, snapshot: snapshot, version: room.version, localRoster: localRoster)
        }
    }

    /// The loops never change after start.
    func loop(_ index: Int) -> any SessionLoop {
        loops.withLock { $0[index] }
    }

    func updateGauges(_ rooms: Rooms) {
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
private final class StoppedSessionLoop: SessionLoop {
    func deliverRoomUpdate(_ session: Session, snapshot: RoomSnapshot, roster: [ControlMessage.Roster]) {}
    func deliverReplacement(_ session: Session) {}
    func deliverTrunkUpdate(_ trunk: Trunk, snapshot: RoomSnapshot, version: UInt32, localRoster: [ControlMessage.Roster.Member]) {}
    func deliverEviction(_ session: Session) {}
    func deliverTrunkEnd(_ trunk: Trunk, reason: TrunkEndReason) {}
    func deliverText(_ session: Session, sender: String, text: String) {}
    func deliverMediaKeys(_ session: Session, entry: ControlMessage.MediaKeys.Entry, from sender: UInt32) {}
    func deliverTrunkMediaKeys(_ trunk: Trunk, keys: ControlMessage.MediaKeys) {}
    func deliverTrunkText(_ trunk: Trunk, sender: String, text: String) {}
    func deliverTrunkModeration(_ trunk: Trunk, request: ControlMessage.ModerationRequest) {}
    func deliverTrunkClosing(_ trunk: Trunk) {}
    func deliverRemoval(_ session: Session, reason: RemovalReason, message: String) {}
}
