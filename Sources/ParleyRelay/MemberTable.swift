import ParleyBasics
import ParleyWire

/// The members whose datagrams arrive on one loop, by address, and what only a member says:
/// `ready` (proving its address), `leave`, its muted/deafened state (``MemberStatePacer``),
/// its texts (``MemberTexts``), its sealed media keys, and moderation requests (its `mod`
/// claim is checked here, so only a moderator's request reaches the rooms' lock). How a member
/// comes in is ``MemberAdmission``'s; everything it shares with other legs is ``LegHandler``'s.
///
/// Leaving: a member's leg ends (it left, went idle, never sent ready, was replaced, removed,
/// or the relay is stopping); it is told goodbye reliably, and its address stays known in
/// ``Departures`` for a few seconds.
///
/// One loop's thread only; nothing here is locked.
final class MemberTable: @unchecked Sendable {
    private let context: LoopContext
    private let legs: LegHandler
    private unowned(unsafe) var admission: MemberAdmission!

    /// Members whose datagrams arrive on this loop, by source address.
    @exclusivity(unchecked) private var byAddress: [PeerAddress: MemberLeg] = [:]
    /// The same members in ``sweepSliceCount`` groups by id: each tick checks one group's idle
    /// and joining timeouts, so every member is looked at twice a second and no tick holds up
    /// forwarding by walking them all.
    private var sweepSlices: [[PeerAddress: MemberLeg]] = Array(repeating: [:], count: MemberTable.sweepSliceCount)
    private var nextSweepSlice = 0
    /// Members whose latest muted/deafened state waits for their rate (``MemberStatePacer``).
    private var heldBackStates: [PeerAddress: MemberLeg] = [:]
    private(set) var departures = Departures()

    static let sweepSliceCount = 10

    init(context: LoopContext, legs: LegHandler) {
        self.context = context
        self.legs = legs
    }

    func attach(admission: MemberAdmission) {
        self.admission = admission
    }

    @inline(__always)
    func member(at peer: PeerAddress) -> MemberLeg? { byAddress[peer] }

    var count: Int { byAddress.count }

    /// Each active member's stream figures, copied for a scrape.
    func streamSamples() -> [StreamFigures.Sample] {
        byAddress.values.compactMap { member in
            member.streamFigures.map { StreamFigures.Sample(room: member.room, identity: member.identity, figures: $0) }
        }
    }

    /// A member admitted to its room joins this loop.
    func add(_ member: MemberLeg) {
        byAddress[member.peer] = member
        sweepSlices[Self.sweepSlice(of: member)][member.peer] = member
    }

    private static func sweepSlice(of member: MemberLeg) -> Int { Int(member.id % UInt64(sweepSliceCount)) }

    // MARK: Control only a member speaks

    /// A join from a member's own address (plaintext relays: on a secure relay joins come
    /// inside a handshake, never inside a session).
    func receiveJoin(_ message: ControlMessage, wireSize: Int, from member: MemberLeg, now: UInt64) {
        guard !member.transport.isSecure else { return context.drop(.unexpectedControl) }
        admission.receiveJoin(message, size: wireSize, from: member.destination, peer: member.peer, existing: member, now: now)
    }

    func receiveControl(_ message: ControlMessage, from member: MemberLeg, wireSize: Int, now: UInt64) {
        switch message.body {
        case let .ready(ready):
            guard ready.cookie == member.cookie else { return context.drop(.unexpectedControl) }
            member.lastHeardNanoseconds = now
            if member.state == .joining {
                activate(member, now: now)
            } else {
                // The roster is on its way; a ready retransmitted before it arrived needs nothing more.
                legs.resendOutstanding(to: member)
            }
        case .leave:
            // An ack is larger than a leave, so an address that never proved itself gets none.
            if member.state == .active { legs.sendControl(.ack(ControlMessage.Ack(sequence: message.sequence)), sequence: 0, to: member) }
            context.membershipLogs.log(.info, "member left", metadata: ["member": "\(member.logDescription)"], now: now)
            remove(member, reason: .left, now: now)
        case let .memberState(update):
            member.lastHeardNanoseconds = now
            legs.sendControl(.ack(ControlMessage.Ack(sequence: message.sequence)), sequence: 0, to: member)
            guard member.memberState.receive(update) else { return }
            applyMemberState(member, now: now)
        case let .text(text):
            member.lastHeardNanoseconds = now
            receiveText(text, sequence: message.sequence, from: member, now: now)
        case let .moderate(request):
            receiveModeration(request, sequence: message.sequence, from: member, now: now)
        case let .mediaKeys(keys):
            member.lastHeardNanoseconds = now
            receiveMediaKeys(keys, sequence: message.sequence, from: member, now: now)
        case .join, .joined, .roster, .error, .goodbye, .moderationReply, .redirect, .ack, .ping, .pong:
            context.drop(.unexpectedControl)
        }
    }

    /// The member proved its address: it gets the roster and media, the others a new roster.
    func activate(_ member: MemberLeg, now: UInt64) {
        guard context.rooms.activate(member, now: now) else { return }
        member.state = .active
        member.streamFigures = StreamFigures()
        context.membershipLogs.log(.info, "member active", metadata: ["member": "\(member.logDescription)"], now: now)
    }

    /// Tells the room the member's newest state if its rate allows; else holds it for a tick.
    private func applyMemberState(_ member: MemberLeg, now: UInt64) {
        if let state = member.memberState.due(nowNanoseconds: now) {
            context.rooms.setState(state, of: member, now: now)
        }
        heldBackStates[member.peer] = member.memberState.isHeldBack ? member : nil
    }

    /// Relayed once, or refused with an error that says why (answering the text's sequence
    /// number, so the client knows which message it is about); a repeat gets the same answer.
    private func receiveText(_ text: ControlMessage.Text, sequence: UInt32, from member: MemberLeg, now: UInt64) {
        guard member.state == .active else { return context.drop(.unexpectedControl) }
        let ack = ControlMessage.Body.ack(ControlMessage.Ack(sequence: sequence))
        guard let (answer, isRepeat) = member.texts.receive(text, nowNanoseconds: now) else {
            return legs.sendControl(ack, sequence: 0, to: member)
        }
        switch answer {
        case .relayed:
            legs.sendControl(ack, sequence: 0, to: member)
            guard !isRepeat else { return }
            context.metrics.texts[.relayed]?.increment()
            context.rooms.relayText(text.text, sender: member.identity, over: member)
        case let .refused(outcome, reason):
            let code: ControlMessage.ErrorCode = outcome == .refusedRate ? .rateLimited : .malformedRequest
            legs.sendControl(.error(ControlMessage.ErrorReply(code: code, message: reason)), sequence: sequence, to: member)
            guard !isRepeat else { return }
            context.metrics.texts[outcome]?.increment()
        }
    }

    /// Sealed media keys from a member for others of its room: acknowledged (the client sends
    /// them again until it is), then handed to each recipient, within the member's budget. The
    /// relay reads only the SSRCs it routes by; the keys inside are sealed to the recipients.
    private func receiveMediaKeys(_ keys: ControlMessage.MediaKeys, sequence: UInt32, from member: MemberLeg, now: UInt64) {
        guard member.state == .active, member.isEndToEndEncrypted else { return context.drop(.unexpectedControl) }
        legs.sendControl(.ack(ControlMessage.Ack(sequence: sequence)), sequence: 0, to: member)
        // A retransmission whose ack was lost is acknowledged again, not delivered twice.
        guard member.receivedReliable.insert(sequence) else { return }
        guard member.mediaKeyRate.allow(cost: keys.entries.count, nowNanoseconds: now) else {
            context.metrics.mediaKeys[.refusedRate]?.increment(by: keys.entries.count)
            return context.drop(.rateLimited)
        }
        let undeliverable = context.rooms.relayMediaKeys(keys.entries, from: member.ssrc, over: member)
        context.metrics.mediaKeys[.relayed]?.increment(by: keys.entries.count - undeliverable)
        context.metrics.mediaKeys[.undeliverable]?.increment(by: undeliverable)
    }

    /// A moderation request: every request gets one answer, repeated for a repeated request,
    /// and is counted by outcome.
    private func receiveModeration(_ request: ControlMessage.ModerationRequest, sequence: UInt32, from member: MemberLeg, now: UInt64) {
        guard member.state == .active else { return context.drop(.unexpectedControl) }
        member.lastHeardNanoseconds = now
        if let last = member.lastModeration, last.sequence == sequence {
            return context.channel.send(last.answer, to: member, kind: .control)
        }
        let reply: ControlMessage.ModerationReply
        if !member.isModerator {
            reply = .init(outcome: .notModerator, message: "your token does not make you a moderator of \(member.room); "
                + "ask whoever runs the relay for one minted with `parley-relay token --moderator`")
            context.refusalLogs.log(.notice, "moderation refused: not a moderator", metadata: [
                "member": "\(member.logDescription)", "action": "\(request.action.label)",
            ], now: now)
        } else if !member.moderationRate.allow(nowNanoseconds: now) {
            reply = .init(outcome: .rateLimited, message: "too many moderation requests; wait a second and try again")
        } else {
            reply = context.rooms.moderate(request, in: member.room, by: member.identity, now: now, passOn: true)
            if reply.outcome == .done {
                context.membershipLogs.log(.notice, "moderation", metadata: [
                    "by": "\(member.logDescription)", "action": "\(request.action.label)", "target": "\(request.target.logSafe())",
                ], now: now)
            }
        }
        context.metrics.moderation(request.action, from: .member, outcome: reply.outcome)
        // Closing its own room removed the moderator too: the answer still goes to its address.
        guard let bytes = try? ControlMessage(sequence: sequence, body: .moderationReply(reply)).serialized() else { return }
        member.lastModeration = (sequence, bytes)
        context.channel.send(bytes, to: member, kind: .control)
        context.channel.flush()
    }

    // MARK: Members just departed

    /// A sealed packet from an address whose member just left: opened with its keys, and
    /// answered if it is a retransmitted leave or the ack of a goodbye.
    func receiveFromDeparted(_ datagram: inout InboundDatagram, now: UInt64) -> Bool {
        guard let departure = departures[datagram.peer] else { return false }
        if let reason = departure.transport.open(&datagram) {
            context.drop(reason)
            return true
        }
        guard let message = try? ControlMessage(parsing: datagram.readable) else { return true }
        receiveDepartedControl(message, peer: datagram.peer)
        return true
    }

    /// A retransmitted leave whose ack was lost, or the ack of a goodbye: the address was
    /// proven before the member left, so answering it is safe.
    func receiveDepartedControl(_ message: ControlMessage, peer: PeerAddress) {
        guard let departure = departures[peer] else { return context.drop(.notJoined) }
        switch message.body {
        case .leave:
            guard let bytes = try? ControlMessage(body: .ack(ControlMessage.Ack(sequence: message.sequence))).serialized() else { return }
            context.channel.send(bytes, to: departure.destination, transport: departure.transport, kind: .control)
        case let .ack(ack):
            departures.acknowledge(peer, sequence: ack.sequence)
        default:
            context.drop(.notJoined)
        }
    }

    // MARK: Leaving

    /// Takes the member out of its room and this loop, and tells the others.
    func remove(_ member: MemberLeg, reason: RemovalReason, now: UInt64, tellMember: Bool = true) {
        context.rooms.detach(member, now: now)
        close(member, reason: reason, now: now, tellMember: tellMember)
    }

    /// The rooms took the member out (replaced, an SSRC clash, kicked, its room closed): tell it why.
    func closeRemoved(_ member: MemberLeg, reason: RemovalReason, message: String?, now: UInt64) {
        guard member.state != .closed else { return }
        switch reason {
        case .kicked, .roomClosed:
            context.membershipLogs.log(.notice, reason == .kicked ? "member kicked" : "member removed: room closed", metadata: [
                "member": "\(member.logDescription)", "told": "\((message ?? "").logSafe(limit: 300))",
            ], now: now)
        default:
            break
        }
        close(member, reason: reason, now: now, tellMember: true, text: message)
    }

    /// The member's leg ends on this loop: it is told goodbye (reliably) when it listens.
    private func close(_ member: MemberLeg, reason: RemovalReason, now: UInt64, tellMember: Bool, text: String? = nil) {
        member.state = .closed
        member.streamFigures = nil
        if byAddress[member.peer] === member { byAddress[member.peer] = nil }
        let slice = Self.sweepSlice(of: member)
        if sweepSlices[slice][member.peer] === member { sweepSlices[slice][member.peer] = nil }
        if heldBackStates[member.peer] === member { heldBackStates[member.peer] = nil }
        legs.forget(member)
        context.metrics.removals[reason]?.increment()
        let goodbye = Departures.goodbye(to: member, reason: reason, text: text, tellMember: tellMember, now: now)
        if let bytes = goodbye.bytes { context.channel.send(bytes, to: member, kind: .control) }
        if reason != .neverReady, member.isRememberedAfterLeaving, byAddress[member.peer] == nil {
            departures.record(member, goodbye: goodbye.sender, now: now)
        }
    }

    /// Every member here, on shutdown: told, when active.
    func removeAll(reason: RemovalReason, now: UInt64) {
        for member in Array(byAddress.values) {
            remove(member, reason: reason, now: now, tellMember: member.state == .active)
        }
    }

    /// Goodbyes still unacknowledged.
    var unacknowledgedGoodbyes: Int { departures.unacknowledgedGoodbyes }

    // MARK: The tick

    /// States held back by their rate, one slice of the idle and joining timeouts (and the
    /// receiver reports of streams that went quiet), and goodbyes due again.
    func tick(now: UInt64) {
        if !heldBackStates.isEmpty {
            for member in Array(heldBackStates.values) where member.state != .closed { applyMemberState(member, now: now) }
        }
        let idle = UInt64(context.limits.idleTimeoutMilliseconds) * 1_000_000
        let pending = UInt64(context.limits.pendingTimeoutMilliseconds) * 1_000_000
        var expired: [(MemberLeg, RemovalReason)] = []
        for member in sweepSlices[nextSweepSlice].values {
            if member.state == .joining, now &- member.joinedNanoseconds > pending {
                expired.append((member, .neverReady))
            } else if now &- member.lastHeardNanoseconds > idle {
                expired.append((member, .idleTimeout))
            } else if member.state == .active, now >= member.nextReceiverReportNanoseconds {
                // A stream that stopped still gets its last report; a talking one gets it
                // with its next packet, so few are ever sent from here.
                legs.sendReceiverReport(to: member, now: now)
            }
        }
        nextSweepSlice = (nextSweepSlice + 1) % Self.sweepSliceCount
        for (member, reason) in expired {
            context.membershipLogs.log(.info, reason == .neverReady ? "joining member never sent ready; removed" : "member idle; removed", metadata: [
                "member": "\(member.logDescription)",
            ], now: now)
            remove(member, reason: reason, now: now, tellMember: reason == .idleTimeout)
        }
        for resend in departures.due(now: now) {
            context.channel.send(resend.bytes, to: resend.destination, transport: resend.transport, kind: .control)
        }
    }
}
