import ParleyBasics
import ParleySecurity
import ParleyWire

/// The trunks whose peer's datagrams arrive on one loop, by route, and what only a trunk says:
/// the roster of the members behind it, and the texts, moderations and sealed keys it passes
/// on from them (each acted on once, however often the peer sends it again). Everything a
/// trunk shares with other legs — forwarding, RTCP, acknowledgements, what the room hands it —
/// is ``LegHandler``'s. Opening and accepting a trunk is `TrunkTable+Handshake.swift`.
///
/// A trunk is found by its peer's address and the receiver index of the sealed packet, in this
/// loop's own table: nothing shared is read per packet.
///
/// One loop's thread only; nothing here is locked.
final class TrunkTable: @unchecked Sendable {
    let context: LoopContext
    let legs: LegHandler
    /// Trusted keys and openings, shared by the loops.
    let directory: TrunkDirectory
    /// The relay's Noise handshake, which accepts trunk inits, and its replay cache.
    let joins: JoinVerifier

    @exclusivity(unchecked) private(set) var byRoute: [TrunkRoute: TrunkLeg] = [:]

    init(context: LoopContext, legs: LegHandler, directory: TrunkDirectory, joins: JoinVerifier) {
        self.context = context
        self.legs = legs
        self.directory = directory
        self.joins = joins
    }

    /// The trunk a sealed datagram belongs to: its address and the receiver index in its header.
    @inline(__always)
    func trunk(for datagram: InboundDatagram) -> TrunkLeg? {
        guard !byRoute.isEmpty, let header = datagram.sealedHeader else { return nil }
        return byRoute[TrunkRoute(peer: datagram.peer, index: header.receiverIndex)]
    }

    func add(_ trunk: TrunkLeg) { byRoute[trunk.route] = trunk }

    func remove(_ trunk: TrunkLeg) {
        if byRoute[trunk.route] === trunk { byRoute[trunk.route] = nil }
    }

    // MARK: Control only a trunk speaks

    func receiveControl(_ message: ControlMessage, over trunk: TrunkLeg, now: UInt64) {
        if message.isReliable { legs.sendControl(.ack(.init(sequence: message.sequence)), sequence: trunk.takeSequence(), to: trunk) }
        switch message.body {
        case let .roster(page):
            guard let announced = trunk.remoteRoster.add(page) else { return }
            receiveRoster(announced, over: trunk, now: now)
        case let .text(text):
            // From a member behind the trunk, named by its relay; sent again if our ack was lost.
            guard message.isReliable, trunk.receivedReliable.insert(message.sequence) else { return }
            guard ParleyNames.problem(withIdentity: text.sender) == nil, ControlMessage.Text.problem(with: text.text) == nil else {
                return context.drop(.malformed)
            }
            context.metrics.texts[.relayed]?.increment()
            context.rooms.relayText(text.text, sender: text.sender, over: trunk)
        case let .moderate(request):
            // A moderator of the room on the peer relay asked; this relay acts on its members.
            guard message.isReliable, trunk.receivedReliable.insert(message.sequence) else { return }
            guard ParleyNames.problem(withIdentity: request.moderator) == nil else { return context.drop(.malformed) }
            let reply = context.rooms.moderate(request, in: trunk.room, by: request.moderator, now: now, passOn: false)
            context.metrics.moderation(request.action, from: .trunk, outcome: reply.outcome)
            if reply.outcome == .done {
                context.membershipLogs.log(.notice, "moderation from another relay of the room", metadata: [
                    "by": "\(request.moderator.logSafe())", "action": "\(request.action.label)", "target": "\(request.target.logSafe())",
                    "trunk": "\(trunk.logDescription)",
                ], now: now)
            }
        case let .mediaKeys(keys):
            // Sealed keys from a member behind the trunk for members here; opaque to both relays.
            guard message.isReliable, trunk.receivedReliable.insert(message.sequence) else { return }
            let undeliverable = context.rooms.relayMediaKeys(keys.entries, from: keys.sender, over: trunk)
            context.metrics.mediaKeys[.relayed]?.increment(by: keys.entries.count - undeliverable)
            context.metrics.mediaKeys[.undeliverable]?.increment(by: undeliverable)
        case .leave:
            end(trunk, reason: .closedByPeer, now: now, tellPeer: false)
        case let .goodbye(goodbye):
            end(trunk, reason: goodbye.reason == .relayShuttingDown ? .peerShuttingDown : .closedByPeer, now: now, tellPeer: false)
        default:
            // A member's messages (join, ready, redirects, …) mean nothing on a trunk.
            context.drop(.unexpectedControl)
        }
    }

    /// The peer's complete roster: its members' streams arrive over the trunk from now on.
    private func receiveRoster(_ announced: [ControlMessage.Roster.Member], over trunk: TrunkLeg, now: UInt64) {
        // A name from another relay is checked as a member's own is when it joins: one with
        // control, bidirectional or invisible formatting characters could have come from no
        // token, so it is left out rather than put on every member's screen.
        let members = announced.filter { ParleyNames.problem(withIdentity: $0.identity) == nil }
        if members.count < announced.count {
            context.drop(.malformed, count: announced.count - members.count)
            context.refusalLogs.log(.warning, "a relay of the room announced members whose names no token may carry; they are left out",
                                    metadata: ["trunk": "\(trunk.logDescription)", "left out": "\(announced.count - members.count)"], now: now)
        }
        trunk.setRemoteMembers(members, limits: context.limits, now: now)
        let refused = context.rooms.setRemoteMembers(members, streams: trunk.remoteStreams, of: trunk, localKey: directory.localKeyBytes, now: now)
        for ssrc in refused {
            trunk.streamsBySSRC[ssrc] = nil
            context.logger.notice("a member behind a trunk has the SSRC of a member of a relay whose key sorts first; its relay sends it to join again",
                                  metadata: ["trunk": "\(trunk.logDescription)", "ssrc": "\(ssrc)"])
        }
    }

    /// A moderation asked for here, passed on to the peer relay reliably.
    func passOn(_ request: ControlMessage.ModerationRequest, to trunk: TrunkLeg, now: UInt64) {
        guard trunk.state == .active, trunk.reliable.count(of: .moderation) < TrunkLeg.maximumModerationsInFlight else { return }
        // Sent again for as long as a trunk waits before giving up on a silent peer, and more.
        _ = legs.sendReliable(.moderate(request), kind: .moderation, to: trunk, now: now, attempts: 50)
        context.channel.flush()
    }

    /// The trunk's room was closed here: it forwards nothing more, and ends once the peer has
    /// acknowledged the moderations passed on to it (the close among them).
    func closeWhenSettled(_ trunk: TrunkLeg) {
        guard trunk.state == .active else { return }
        trunk.forwarding = .empty
        trunk.endsWhenSettled = true
    }

    // MARK: The tick, the end

    /// Keepalive reports, and the trunks that went quiet, lost their peer's trust or whose room
    /// emptied; on the first loop, the openings in progress too.
    func tick(now: UInt64) {
        if context.index == 0 {
            let (resend, failed) = directory.dueOpenings(now: now)
            for opening in resend { context.channel.send(opening.bytes, to: opening.destination, kind: .control) }
            for event in failed {
                context.logger.warning("\(event)")
                directory.emit(event)
            }
        }
        guard !byRoute.isEmpty else { return }
        let timings = directory.timings
        let distrusted = directory.keysDistrusted(longerThan: timings.distrustGrace, now: now)
        var ended: [(TrunkLeg, TrunkEndReason)] = []
        for trunk in byRoute.values {
            if !distrusted.isEmpty, distrusted.contains(trunk.peerRelay.publicKey) {
                ended.append((trunk, .noLongerTrusted))
            } else if trunk.endsWhenSettled, trunk.reliable.count(of: .moderation) == 0 {
                ended.append((trunk, .closedHere))
            } else if now &- trunk.lastHeardNanoseconds > timings.timeout {
                ended.append((trunk, .timedOut))
            } else if let since = trunk.emptySinceNanoseconds, now &- since >= timings.emptyRoomGrace {
                ended.append((trunk, .roomEmptied))
            } else if now >= trunk.nextReportNanoseconds {
                // The receiver report is the trunk's keepalive: sent even with nothing to report.
                trunk.nextReportNanoseconds = now &+ timings.keepalive
                legs.sendReceiverReport(to: trunk, now: now, keepalive: true)
            }
        }
        for (trunk, reason) in ended { end(trunk, reason: reason, now: now) }
    }

    /// Ends a trunk here: out of its room and this loop, the peer told when it still listens,
    /// the event given. A trunk opened here that went quiet is opened again while its room
    /// has members here.
    func end(_ trunk: TrunkLeg, reason: TrunkEndReason, now: UInt64, tellPeer: Bool? = nil) {
        guard trunk.state == .active else { return }
        let tell = tellPeer ?? (reason != .timedOut && reason != .replaced)
        if tell {
            let body: ControlMessage.Body = reason == .shuttingDown
                ? .goodbye(.init(reason: .relayShuttingDown, message: "the relay is shutting down"))
                : .leave(.init())
            legs.sendControl(body, sequence: trunk.takeSequence(), to: trunk)
        }
        trunk.state = .closed
        remove(trunk)
        legs.forget(trunk)
        context.rooms.detach(trunk, now: now)
        directory.unregister(trunk)
        let event = TrunkEvent(room: trunk.room, peer: trunk.peerRelay, openedHere: trunk.openedHere, change: .ended(reason))
        context.logger.info("\(event)")
        directory.emit(event)
        if reason == .timedOut, trunk.openedHere, trunk.localMemberCount > 0, !context.isShuttingDown {
            beginTrunk(room: trunk.room, to: trunk.peerRelay, destination: trunk.destination)
        }
        context.channel.flush()
    }

    /// Every trunk here, on shutdown.
    func endAll(reason: TrunkEndReason, now: UInt64) {
        for trunk in Array(byRoute.values) { end(trunk, reason: reason, now: now) }
    }
}
