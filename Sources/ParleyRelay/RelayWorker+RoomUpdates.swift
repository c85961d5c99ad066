import ParleyWire

/// News from the rooms: ``RelayCore`` hands it over from whichever thread changed the room,
/// and it is applied here on the session's own loop, so the forwarding path never reads a
/// list another thread is writing.
extension RelayWorker: SessionLoop {
    func deliverRoomUpdate(_ session: Session, snapshot: RoomSnapshot, roster: [ControlMessage.Roster]) {
        loop.execute { self.applyRoomUpdate(session, snapshot: snapshot, roster: roster) }
    }

    func deliverReplacement(_ session: Session) {
        loop.execute { self.closeReplaced(session) }
    }

    func deliverRemoval(_ session: Session, reason: RemovalReason, message: String) {
        loop.execute { self.closeRemoved(session, reason: reason, message: message) }
    }

    /// A new roster and forwarding snapshot for `session`'s room.
    /// `roster` is empty when only the forwarding changes now and the roster follows later
    /// (``RosterSchedule``); each is taken only if newer than what the session has.
    func applyRoomUpdate(_ session: Session, snapshot: RoomSnapshot, roster: [ControlMessage.Roster]) {
        guard session.state != .closed else { return }
        if session.forwarding === RoomSnapshot.empty || RoomSnapshot.isNewer(snapshot.version, than: session.forwarding.version) {
            session.forwarding = snapshot
            session.media.isServerMuted = snapshot.serverMuted.contains(session.id)
        }
        guard let version = roster.first?.version, session.rosterVersion.map({ RoomSnapshot.isNewer(version, than: $0) }) ?? true else { return }
        session.rosterVersion = version
        let now = monotonicNanoseconds()
        for page in roster {
            let sequence = session.takeSequence()
            let message = ControlMessage(sequence: sequence, isReliable: true, body: .roster(page))
            guard let bytes = try? message.serialized() else { continue }
            session.reliable.enqueue(sequence: sequence, kind: .roster(version: page.version), bytes: bytes, nowNanoseconds: now)
            awaitingAcknowledgement[session.peer] = session
            send(bytes, to: session, kind: .control)
        }
        flush()
    }

    /// A moderator removed the member: it is out of its room already; tell it why.
    func closeRemoved(_ session: Session, reason: RemovalReason, message: String) {
        guard session.state != .closed else { return }
        let now = monotonicNanoseconds()
        membershipLogs.log(.notice, reason == .kicked ? "member kicked" : "member removed: room closed", metadata: [
            "member": "\(session.logDescription)", "told": "\(message.logSafe(limit: 300))",
        ], now: now)
        finishClosing(session, reason: reason, now: now, tellMember: true, text: message)
        flush()
    }

    /// Another loop admitted a new session with this one's identity.
    func closeReplaced(_ session: Session) {
        guard session.state != .closed else { return }
        finishClosing(session, reason: .replaced, now: monotonicNanoseconds(), tellMember: true)
        flush()
    }
}
