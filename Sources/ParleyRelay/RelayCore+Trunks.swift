import ParleyWire

/// The rooms' side of trunks: a trunk stands in its room's snapshot beside the members, the
/// members its peer announces join the room's roster, and SSRC clashes are settled here under
/// the core's one lock (``Room/setRemoteMembers(_:trunkID:localKey:)``).
extension RelayCore {
    /// Puts an open trunk in its room, opening the room when the relay has space for one more.
    func attach(_ trunk: TrunkLeg, in rooms: inout Rooms, now: UInt64) -> RoomAdmission {
        guard !rooms.isShuttingDown else { return .refused(.notJoined, "the relay is shutting down") }
        switch rooms.directory.attachTrunk(id: trunk.id, peerKey: trunk.peerRelay.publicKey, to: trunk.room) {
        case let .refused(code, message):
            return .refused(code, message)
        case .admitted:
            rooms.legs[trunk.id] = trunk
            // The room's running bans hold on the peer too, wherever the kick was made.
            for (identity, ban) in rooms.kicks.bans(in: trunk.room, now: now) {
                loop(trunk.workerIndex).deliverModeration(
                    .init(action: .kick, target: identity, banSeconds: ban.secondsLeft(now: now), reason: ban.reason, moderator: ban.by), to: trunk)
            }
            // The members' forwarding changes now; their roster is unchanged until the
            // peer's roster arrives.
            publish(trunk.room, in: rooms, rosterTo: .nobody)
            updateGauges(rooms)
            return .admitted(replaced: nil)
        }
    }

    /// Takes a trunk and the members it brought out of its room (its leg is out already).
    func detachTrunk(_ id: UInt64, from room: String, in rooms: inout Rooms, now: UInt64) {
        rooms.trunkStreams[id] = nil
        let rosterChanged = rooms.directory.detachTrunk(id: id, from: room)
        if rooms.directory[room] == nil {
            return
        } else if rosterChanged {
            roomChanged(room, in: &rooms, now: now)
        } else {
            publish(room, in: rooms, rosterTo: .nobody)
        }
    }

    /// The peer's roster arrived complete: its members join the room's roster, and their
    /// streams' loss boards the snapshot. Returns the SSRCs not admitted here (a member of a
    /// relay whose key sorts first holds them); members here who lose theirs are sent away.
    func setRemoteMembers(
        _ roster: [ControlMessage.Roster.Member], streams: [RoomSnapshot.RemoteStream], of trunk: TrunkLeg, localKey: [UInt8], now: UInt64
    ) -> [UInt32] {
        rooms.withLock { rooms in
            guard rooms.legs[trunk.id] === trunk else { return [] }
            let outcome = rooms.directory.setRemoteMembers(roster, trunkID: trunk.id, localKey: localKey, in: trunk.room)
            rooms.trunkStreams[trunk.id] = streams.filter { !outcome.refused.contains($0.ssrc) }
            for member in outcome.evicted {
                guard let leg = rooms.legs.removeValue(forKey: member.sessionID) else { continue }
                loop(leg.workerIndex).deliverEnding(.removed(.ssrcClash, message: nil), to: leg)
            }
            roomChanged(trunk.room, in: &rooms, now: now)
            updateGauges(rooms)
            return outcome.refused
        }
    }

    func endTrunk(_ trunk: TrunkLeg, reason: TrunkEndReason) {
        loop(trunk.workerIndex).deliverEnding(.trunkEnded(reason), to: trunk)
    }
}
