import ParleyWire

/// What every leg does with what arrives over it and what its room sends it, written once for
/// members, trunks and browser members: open the datagram with the leg's
/// transport, forward its media to the receivers of the leg's room snapshot, terminate its RTCP
/// (``LegRTCP``), take the control every leg speaks (acknowledgements, pings), and deliver what
/// the room hands the leg — snapshots, rosters, texts, sealed media keys — reliably. What only
/// one role understands (a member's ready, leave, state, texts and moderation; a trunk's
/// roster and what it passes on) goes to its table: ``MemberTable``, ``TrunkTable``.
///
/// One loop's thread only; nothing here is locked.
final class LegHandler: @unchecked Sendable {
    let context: LoopContext
    private let channel: RelayChannel
    private unowned(unsafe) var members: MemberTable!
    private var trunks: TrunkTable?

    /// Legs with a reliable message not yet acknowledged (or a roster to send again): the tick
    /// retransmits for these only.
    private var awaitingAcknowledgement: [UInt64: Leg] = [:]
    /// Legs with sealed media keys gathered for the next tick (or a full message), so a
    /// rotation reaches each in a few messages, not one per sender.
    private var pendingMediaKeys: [UInt64: Leg] = [:]

    init(context: LoopContext) {
        self.context = context
        channel = context.channel
    }

    func attach(members: MemberTable, trunks: TrunkTable?) {
        self.members = members
        self.trunks = trunks
    }

    // MARK: What arrives over a leg

    /// A datagram over `leg`: opened in place by the leg's transport, then handled by its kind.
    @inline(__always)
    func receive(_ datagram: inout InboundDatagram, over leg: Leg, now: UInt64) {
        if let reason = leg.transport.open(&datagram) { return channel.drop(reason) }
        // An authenticated packet proves the leg is there, whatever becomes of it.
        if datagram.sealedHeader != nil { leg.lastHeardNanoseconds = now }
        switch datagram.kind {
        case .rtp: forwardMedia(datagram, from: leg, now: now)
        case .rtcp: receiveRTCP(datagram, from: leg, now: now)
        case .control: receiveControl(datagram, from: leg, now: now)
        case .handshake, .sealed, .stun, .dtls, .unknown: channel.drop(.malformed)
        }
    }

    /// An RTP packet: admitted by the stream it belongs to, then one copy to each receiver of
    /// the leg's room, payload untouched. Nothing here allocates.
    @inline(__always)
    private func forwardMedia(_ datagram: InboundDatagram, from leg: Leg, now: UInt64) {
        guard let view = try? RTPPacketView(parsing: datagram.readable) else { return channel.drop(.malformed) }
        guard let stream = leg.streamToAdmit(ssrc: view.ssrc) else { return channel.drop(.foreignSSRC) }
        let decision = MediaAdmission.admit(view, from: &stream.media, isActive: leg.state == .active, nowNanoseconds: now)
        guard decision == .forward else {
            if case let .drop(reason) = decision {
                channel.drop(reason)
                // A server-muted member is still there, talking: not idle.
                if reason == .serverMuted { leg.lastHeardNanoseconds = now }
            }
            return
        }
        leg.lastHeardNanoseconds = now
        if writeToReceivers(datagram.readable, from: leg, kind: .media, now: now) > 0 { channel.forwarded(readAt: now) }
        // The relay's receiver report to the leg goes out with one of its own packets, so
        // reports are spread as evenly as the packets are; built all at once in a timer
        // tick, they would hold up forwarding. Written into the channel's scratch space.
        if now >= leg.nextReceiverReportNanoseconds { sendReceiverReport(to: leg, now: now) }
    }

    /// Writes `packet` to every receiver of the leg's room but the leg itself (and, for what
    /// came over a trunk, no trunk), sealed for each; returns the copies written.
    @inline(__always)
    private func writeToReceivers(_ packet: UnsafeRawBufferPointer, from leg: Leg, kind: SentKind, now: UInt64) -> Int {
        let toTrunks = leg.forwardsToTrunks
        var copies = 0
        for receiver in leg.forwarding.receivers where receiver.legID != leg.id && (toTrunks || !receiver.isTrunk) {
            if channel.write(packet, to: receiver.destination, transport: receiver.transport, kind: kind, now: now) { copies += 1 }
        }
        return copies
    }

    private func receiveRTCP(_ datagram: InboundDatagram, from leg: Leg, now: UInt64) {
        switch LegRTCP.receive(datagram.readable, from: leg, now: now) {
        case let .dropped(reason):
            channel.drop(reason)
        case let .accepted(nacks, forward):
            if nacks > 0 { channel.drop(.nackNotServed, count: nacks) }
            guard let forward else { return }
            _ = forward.withUnsafeBytes { writeToReceivers($0, from: leg, kind: .rtcp, now: now) }
        }
    }

    /// The relay's receiver report to the leg about the streams that arrive over it; the
    /// caller decides when one is due. `keepalive`: sent even with nothing to report.
    func sendReceiverReport(to leg: Leg, now: UInt64, keepalive: Bool = false) {
        if !(leg is TrunkLeg) { leg.nextReceiverReportNanoseconds = LegRTCP.nextReceiverReport(after: now) }
        let count = LegRTCP.writeReceiverReport(for: leg, relaySSRC: context.relaySSRC, now: now, keepalive: keepalive, into: channel.scratch)
        channel.sendScratch(count, to: leg, kind: .rtcp, now: now)
    }

    /// A control message over `leg`: what every leg speaks is answered here, the rest goes to
    /// the leg's table.
    private func receiveControl(_ datagram: InboundDatagram, from leg: Leg, now: UInt64) {
        guard let message = try? ControlMessage(parsing: datagram.readable) else { return channel.drop(.malformed) }
        let member = leg as? MemberLeg
        if case .join = message.body, let member {
            // Joins are handled even over the rate: a client retransmits them with backoff.
            return members.receiveJoin(message, wireSize: datagram.wireSize, from: member, now: now)
        }
        guard leg.controlRate.allow(nowNanoseconds: now) else { return channel.drop(.rateLimited) }
        switch message.body {
        case let .ack(ack):
            leg.lastHeardNanoseconds = now
            acknowledge(ack.sequence, on: leg, now: now)
        case let .ping(ping):
            leg.lastHeardNanoseconds = now
            sendControl(.pong(ControlMessage.Pong(timestamp: ping.timestamp)), sequence: message.sequence, to: leg, replyingTo: datagram.wireSize)
        case .pong:
            leg.lastHeardNanoseconds = now
        default:
            if let member {
                members.receiveControl(message, from: member, wireSize: datagram.wireSize, now: now)
            } else if let trunk = leg as? TrunkLeg {
                trunks?.receiveControl(message, over: trunk, now: now)
            }
        }
    }

    /// The leg acknowledged a reliable message: it is done with, and the next text may go.
    func acknowledge(_ sequence: UInt32, on leg: Leg, now: UInt64) {
        leg.reliable.acknowledge(sequence: sequence)
        leg.rosterOut.acknowledge(sequence: sequence)
        if sequence == leg.textsOut.inFlight {
            leg.textsOut.settled()
            sendNextText(to: leg, now: now)
        }
    }

    // MARK: What the relay sends a leg

    /// A control message the relay builds for the leg, sealed with its keys. `replyingTo`: the
    /// size on the wire of the datagram answered, which the answer may not exceed (the seal adds
    /// the same overhead the leg's own packet carried, so the limit compares plaintexts).
    func sendControl(_ body: ControlMessage.Body, sequence: UInt32, to leg: Leg, replyingTo wireSize: Int? = nil) {
        let overhead = leg.transport.isSecure ? SealedHeader.overhead : 0
        guard let bytes = ControlReply.message(body, sequence: sequence, limit: wireSize.map { $0 - overhead }) else { return }
        channel.send(bytes, to: leg, kind: .control)
    }

    /// Sends `body` reliably: again until the leg acknowledges it or `attempts` run out.
    func sendReliable(_ body: ControlMessage.Body, kind: ReliableSender.Kind, to leg: Leg, now: UInt64,
                      attempts: Int = ReliableSender.maximumAttempts) -> UInt32? {
        let sequence = leg.takeSequence()
        guard let bytes = try? ControlMessage(sequence: sequence, isReliable: true, body: body).serialized() else { return nil }
        leg.reliable.enqueue(sequence: sequence, kind: kind, bytes: bytes, nowNanoseconds: now, attempts: attempts)
        awaitingAcknowledgement[leg.id] = leg
        channel.send(bytes, to: leg, kind: .control)
        return sequence
    }

    /// Everything outstanding, at once (a member's retransmitted ready: its roster is on the way).
    func resendOutstanding(to leg: Leg) {
        for message in leg.reliable.outstanding { channel.send(message.bytes, to: leg, kind: .control) }
    }

    // MARK: What the room hands a leg

    /// The leg's room changed: it forwards to the new snapshot (if newer than its own), and is
    /// sent the roster if it is news for it.
    func apply(_ update: RoomUpdate, to leg: Leg, now: UInt64) {
        guard leg.state != .closed else { return }
        if leg.forwarding === RoomSnapshot.empty || RoomSnapshot.isNewer(update.snapshot.version, than: leg.forwarding.version) {
            leg.forwarding = update.snapshot
        }
        leg.roomChanged(leg.forwarding, now: now)
        if let roster = update.roster, leg.rosterOut.wants(roster) { sendRoster(roster, to: leg, now: now) }
        channel.flush()
    }

    /// Every page of `roster`, reliably; a roster given up is sent again from the tick.
    private func sendRoster(_ roster: RoomRoster, to leg: Leg, now: UInt64) {
        var sequences: Set<UInt32> = []
        for page in roster.pages {
            if let sequence = sendReliable(.roster(page), kind: .roster(version: page.version), to: leg, now: now) { sequences.insert(sequence) }
        }
        leg.rosterOut.sent(roster, pageSequences: sequences)
    }

    /// A text from the member `sender` for the leg: queued, sent one at a time in the room's order.
    func queueText(_ text: String, from sender: String, to leg: Leg, now: UInt64) {
        guard leg.state == .active else { return }
        if !leg.textsOut.enqueue(sender: sender, text: text) { context.metrics.texts[.receiverQueueFull]?.increment() }
        sendNextText(to: leg, now: now)
        channel.flush()
    }

    /// The leg's next queued text, if none is in flight.
    private func sendNextText(to leg: Leg, now: UInt64) {
        guard leg.state == .active, leg.textsOut.inFlight == nil, leg.textsOut.hasQueued else { return }
        let sequence = leg.takeSequence()
        guard let text = leg.textsOut.next(sequence: sequence),
              let bytes = try? ControlMessage(sequence: sequence, isReliable: true, body: .text(text)).serialized() else { return }
        leg.reliable.enqueue(sequence: sequence, kind: .text, bytes: bytes, nowNanoseconds: now)
        awaitingAcknowledgement[leg.id] = leg
        channel.send(bytes, to: leg, kind: .control)
    }

    /// Sealed media keys from the member whose SSRC is `sender`, for the leg: gathered until
    /// the next tick, or sent at once when they fill a message.
    func queueMediaKeys(_ entries: [ControlMessage.MediaKeys.Entry], from sender: UInt32, to leg: Leg, now: UInt64) {
        guard leg.state == .active else { return }
        let waiting = leg.mediaKeysOut.count + leg.reliable.count(of: .mediaKeys) * ControlMessage.MediaKeys.maximumEntries
        guard waiting + entries.count <= Leg.maximumMediaKeysInFlight else {
            context.metrics.mediaKeys[.receiverQueueFull]?.increment(by: entries.count)
            return
        }
        leg.mediaKeysOut.append(contentsOf: entries.map { PendingMediaKey(sender: sender, entry: $0) })
        if leg.mediaKeysOut.count >= ControlMessage.MediaKeys.maximumEntries {
            sendPendingMediaKeys(to: leg, now: now)
            channel.flush()
        } else {
            pendingMediaKeys[leg.id] = leg
        }
    }

    /// The leg's gathered keys, in as few reliable messages as fit a datagram. A member is told
    /// each key's sender in its entry (the recipient is the member); over a trunk each message
    /// names its sender, and its entries the recipients behind the trunk.
    private func sendPendingMediaKeys(to leg: Leg, now: UInt64) {
        var pending = leg.mediaKeysOut[...]
        leg.mediaKeysOut = []
        guard leg.state == .active else { return }
        let namesSender = leg is TrunkLeg
        while let first = pending.first {
            var entries: [ControlMessage.MediaKeys.Entry] = []
            var size = 0
            while let next = pending.first, entries.count < ControlMessage.MediaKeys.maximumEntries,
                  !namesSender || next.sender == first.sender,
                  entries.isEmpty || size + 6 + next.entry.package.count <= Self.mediaKeysMessageBudget {
                entries.append(namesSender ? next.entry : ControlMessage.MediaKeys.Entry(ssrc: next.sender, package: next.entry.package))
                size += 6 + next.entry.package.count
                pending = pending.dropFirst()
            }
            let keys = ControlMessage.MediaKeys(sender: namesSender ? first.sender : 0, entries: entries)
            _ = sendReliable(.mediaKeys(keys), kind: .mediaKeys, to: leg, now: now)
        }
    }

    /// The entries of one media-keys message: well inside a datagram.
    static let mediaKeysMessageBudget = 1_000

    // MARK: The tick

    /// Retransmissions due, texts and rosters the reliable sender gave up, gathered keys.
    func tick(now: UInt64) {
        if !awaitingAcknowledgement.isEmpty {
            var settled: [UInt64] = []
            for (id, leg) in awaitingAcknowledgement {
                guard leg.state != .closed else {
                    settled.append(id)
                    continue
                }
                for bytes in leg.reliable.due(nowNanoseconds: now) { channel.send(bytes, to: leg, kind: .control) }
                // The text in flight was given up (the leg heard none of its attempts): the
                // next goes, and the idle timeout decides about the leg.
                if let inFlight = leg.textsOut.inFlight, !leg.reliable.outstanding.contains(where: { $0.sequence == inFlight }) {
                    leg.textsOut.settled()
                    sendNextText(to: leg, now: now)
                }
                if let roster = leg.rosterOut.givenUp(reliable: leg.reliable) { sendRoster(roster, to: leg, now: now) }
                if leg.reliable.isEmpty { settled.append(id) }
            }
            for id in settled { awaitingAcknowledgement[id] = nil }
        }
        if !pendingMediaKeys.isEmpty {
            for leg in pendingMediaKeys.values { sendPendingMediaKeys(to: leg, now: now) }
            pendingMediaKeys = [:]
        }
    }

    /// The leg ended: nothing more is sent to it from here.
    func forget(_ leg: Leg) {
        if awaitingAcknowledgement[leg.id] === leg { awaitingAcknowledgement[leg.id] = nil }
        if pendingMediaKeys[leg.id] === leg { pendingMediaKeys[leg.id] = nil }
    }
}
