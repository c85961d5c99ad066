import ParleyWire

/// Leaving: a member's session ends (it left, went idle, never sent ready, was replaced, or
/// the relay is stopping); it is told goodbye reliably, and its address stays known in
/// ``Departures`` for a few seconds.
extension RelayWorker {
    /// Takes the member out of its room and this loop, and tells the others.
    func remove(_ session: Session, reason: RemovalReason, now: UInt64, tellMember: Bool = true) {
        rooms.remove(session, now: now)
        finishClosing(session, reason: reason, now: now, tellMember: tellMember)
    }

    func finishClosing(_ session: Session, reason: RemovalReason, now: UInt64, tellMember: Bool, text: String? = nil) {
        session.state = .closed
        session.gauges?.destroy()
        session.gauges = nil
        if sessions[session.peer] === session { sessions[session.peer] = nil }
        let slice = Self.sweepSlice(of: session)
        if sweepSlices[slice][session.peer] === session { sweepSlices[slice][session.peer] = nil }
        if awaitingAcknowledgement[session.peer] === session { awaitingAcknowledgement[session.peer] = nil }
        metrics.removals[reason]?.increment()
        let goodbye = Departures.goodbye(to: session, reason: reason, text: text, tellMember: tellMember, now: now)
        if let bytes = goodbye.bytes { send(bytes, to: session, kind: .control) }
        if let browser = session.browser {
            // The page's WebSocket carried the goodbye, reliably: nothing to retransmit.
            return finishClosingBrowser(session, transport: browser, reason: reason)
        }
        if reason != .neverReady, sessions[session.peer] == nil {
            departures.record(session, goodbye: goodbye.sender, now: now)
        }
    }

    // MARK: Shutdown

    /// Every member here is told the relay is going away, reliably, until it acks or the
    /// grace period ends.
    func beginShutdown() {
        isShuttingDown = true
        let now = monotonicNanoseconds()
        for session in Array(sessions.values) {
            remove(session, reason: .shutdown, now: now, tellMember: session.state == .active)
        }
        for trunk in Array(trunks.values) { endTrunk(trunk, reason: .shuttingDown, now: now) }
        flush()
    }

    /// Goodbyes still unacknowledged.
    var unacknowledgedGoodbyes: Int { departures.unacknowledgedGoodbyes }
}
