import ParleyWire

extension RelayWorker {
    /// Every ``tickIntervalNanoseconds``: retransmissions, members' states held back by
    /// their rate, one slice of the idle and joining
    /// timeouts (and the receiver reports of streams that went quiet), departures, and the
    /// counters for /metrics. (Receiver reports go out with the stream's own packets, in
    /// `forwardMedia`.) The tick holds up forwarding while it runs, so it touches only what
    /// is due.
    func tick() {
        let now = monotonicNanoseconds()
        let idle = UInt64(limits.idleTimeoutMilliseconds) * 1_000_000
        let pending = UInt64(limits.pendingTimeoutMilliseconds) * 1_000_000
        var acknowledged: [PeerAddress] = []
        for (peer, session) in awaitingAcknowledgement {
            resendReliable(session, now: now, force: false)
            if session.texts.inFlight != nil { settleTextIfGivenUp(session, now: now) }
            if session.reliable.isEmpty { acknowledged.append(peer) }
        }
        for peer in acknowledged { awaitingAcknowledgement[peer] = nil }
        if !heldBackStates.isEmpty { applyHeldBackStates(now: now) }
        if !pendingMediaKeys.isEmpty {
            for session in pendingMediaKeys.values { sendPendingMediaKeys(to: session, now: now) }
            pendingMediaKeys = [:]
        }
        var expired: [(Session, RemovalReason)] = []
        for session in sweepSlices[nextSweepSlice].values {
            if session.state == .joining, now &- session.joinedNanoseconds > pending {
                expired.append((session, .neverReady))
            } else if now &- session.lastHeardNanoseconds > idle {
                expired.append((session, .idleTimeout))
            } else if session.state == .active, now >= session.nextReceiverReportNanoseconds {
                // A stream that stopped still gets its last report; a talking one gets it
                // with its next packet, so few are ever sent from here.
                sendReceiverReport(to: session, now: now)
            }
        }
        nextSweepSlice = (nextSweepSlice + 1) % Self.sweepSliceCount
        for (session, reason) in expired {
            membershipLogs.log(.info, reason == .neverReady ? "joining member never sent ready; removed" : "member idle; removed", metadata: [
                "member": "\(session.logDescription)",
            ], now: now)
            remove(session, reason: reason, now: now, tellMember: reason == .idleTimeout)
        }
        rooms.publishDueRosters(now: now)
        tickTrunks(now: now)
        if !handshakingBrowsers.isEmpty { retransmitBrowserHandshakes(now: now) }
        if index == 0, let browsers, nextSweepSlice == 0 { browsers.offers.expire(now: now) }
        membershipLogs.flushSummary(now: now)
        refusalLogs.flushSummary(now: now)
        for resend in departures.due(now: now) {
            send(resend.bytes, to: resend.destination, protector: resend.protector, kind: .control)
        }
        if now &- lastStatisticsFlush >= 500_000_000 { flushStatistics(now: now) }
        flush()
    }

    static func sweepSlice(of session: Session) -> Int { Int(session.id % UInt64(sweepSliceCount)) }

    func resendReliable(_ session: Session, now: UInt64, force: Bool) {
        if force {
            for message in session.reliable.outstanding { send(message.bytes, to: session, kind: .control) }
        } else {
            for bytes in session.reliable.due(nowNanoseconds: now) { send(bytes, to: session, kind: .control) }
        }
    }
}
