import ParleyWire

/// The rooms' side of trunks: a trunk stands in its room's snapshot beside the members, the
/// members its peer announces join the room's roster, and SSRC clashes are settled here under
/// the core's one lock (``Room/setRemoteMembers(_:trunkID:localKey:)``).
extension RelayCore {
    /// Puts an open trunk in its room, opening the room when the relay has space for one more.
    func attachTrunk(_ trunk: Trunk, now: UInt64) -> RoomAdmission {
        rooms.withLock { rooms in
            guard !rooms.isShuttingDown else { return .refused(.notJoined, "the relay is shutting down") }
            switch rooms.directory.attachTrunk(id: trunk.id, peerKey: trunk.peer.publicKey, to: trunk.room) {
            case let .refused(code, message):
                return .refused(code, message)
            case .admitted:
                rooms.trunks[trunk.room, default: []].append(trunk)
                // The room's running bans hold on the peer too, wherever the kick was made.
                for (identity, ban) in rooms.kicks.bans(in: trunk.room, now: now) {
                    loop(trunk.workerIndex).deliverTrunkModeration(
                        trunk, request: .init(action: .kick, target: identity, banSeconds: ban.secondsLeft(now: now), reason: ban.reason, moderator: ban.by))
                }
                // The members' forwarding changes now; their roster is unchanged until the
                // peer's roster arrives.
                publish(trunk.room, in: rooms, rosterTo: .nobody)
                updateGauges(rooms)
                return .admitted(replaced: nil)
            }
        }
    }

    /// Takes a trunk and the members it brought out of its room.
    func detachTrunk(_ trunk: Trunk, now: UInt64) {
        rooms.withLock { rooms in
            guard var list = rooms.trunks[trunk.room], let index = list.firstIndex(where: { $0 === trunk }) else { return }
            list.remove(at: index)
            rooms.trunks[trunk.room] = list.isEmpty ? nil : list
            rooms.trunkStreams[trunk.id] = nil
            let rosterChanged = rooms.directory.detachTrunk(id: trunk.id, from: trunk.room)
            if rooms.directory[trunk.room] == nil {
                rooms.rosterSchedule.roomClosed(trunk.room)
            } else if rosterChanged {
                roomChanged(trunk.room, in: &rooms, now: now)
            } else {
                publish(trunk.room, in: rooms, rosterTo: .nobody)
            }
            updateGauges(rooms)
        }
    }

    /// The peer's roster arrived complete: its members join the room's roster, and their
    /// streams' loss boards the snapshot. Returns the SSRCs not admitted here (a member of a
    /// relay whose key sorts first holds them); members here who lose theirs are sent away.
    func setRemoteMembers(
        _ roster: [ControlMessage.Roster.Member], streams: [RoomSnapshot.RemoteStream], of trunk: Trunk, localKey: [UInt8], now: UInt64
    ) -> [UInt32] {
        rooms.withLock { rooms in
            guard rooms.trunks[trunk.room]?.contains(where: { $0 === trunk }) == true else { return [] }
            let outcome = rooms.directory.setRemoteMembers(roster, trunkID: trunk.id, localKey: localKey, in: trunk.room)
            rooms.trunkStreams[trunk.id] = streams.filter { !outcome.refused.contains($0.ssrc) }
            for member in outcome.evicted {
                guard let session = rooms.sessions.removeValue(forKey: member.sessionID) else { continue }
                loop(session.workerIndex).deliverEviction(session)
            }
            roomChanged(trunk.room, in: &rooms, now: now)
            updateGauges(rooms)
            return outcome.refused
        }
    }

    func endTrunk(_ trunk: Trunk, reason: TrunkEndReason) {
        loop(trunk.workerIndex).deliverTrunkEnd(trunk, reason: reason)
    }

    /// Every trunk attached to a room.
    var allTrunks: [Trunk] {
        rooms.withLock { rooms in rooms.trunks.values.flatMap { $0 } }
    }
}
