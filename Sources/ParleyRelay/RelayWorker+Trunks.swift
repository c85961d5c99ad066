import NIOCore
import ParleySecurity
import ParleyWire

/// Trunks at the loop: forwarding what crosses one, its RTCP and roster, its keepalive, and
/// its end; opening and accepting one are `RelayWorker+TrunkHandshake.swift`.
///
/// A trunk is found by its peer's address and the receiver index of the sealed packet, in
/// this loop's own table (``RelayWorker/trunks``): nothing shared is read per packet.
extension RelayWorker {
    // MARK: Receiving

    /// The trunk a sealed datagram from `peer` belongs to: its receiver index names it.
    @inline(__always)
    func trunk(for buffer: ByteBuffer, from peer: PeerAddress) -> Trunk? {
        guard let index = buffer.getInteger(at: buffer.readerIndex + 4, as: UInt32.self) else { return nil }
        return trunks[TrunkRoute(peer: peer, index: index)]
    }

    func receiveFromTrunk(_ buffer: ByteBuffer, trunk: Trunk, now: UInt64) {
        guard let inner = open(buffer, with: trunk.protector) else { return }
        trunk.lastHeardNanoseconds = now
        switch inner.withUnsafeReadableBytes({ PacketKind($0) }) {
        case .rtp: forwardFromTrunk(inner, trunk: trunk, now: now)
        case .rtcp: receiveTrunkRTCP(inner, trunk: trunk, now: now)
        case .control: receiveTrunkControl(inner, trunk: trunk, now: now)
        case .handshake, .sealed, .stun, .dtls, .unknown: drop(.malformed)
        }
    }

    /// A stream of a member behind the trunk: admitted as that member's own packet would be
    /// at its relay (its SSRC announced in the peer's roster, within a member's rates), then
    /// one copy to each member here and none to any other trunk.
    private func forwardFromTrunk(_ buffer: ByteBuffer, trunk: Trunk, now: UInt64) {
        let decision = buffer.withUnsafeReadableBytes { packet -> MediaAdmission.Decision in
            guard packet.count >= 12 else { return .drop(.malformed) }
            let ssrc = UInt32(packet[8]) << 24 | UInt32(packet[9]) << 16 | UInt32(packet[10]) << 8 | UInt32(packet[11])
            guard let stream = trunk.streams[ssrc] else { return .drop(.foreignSSRC) }
            return MediaAdmission.admit(packet, from: &stream.media, isActive: true, nowNanoseconds: now)
        }
        guard decision == .forward else {
            if case let .drop(reason) = decision { drop(reason) }
            return
        }
        let copies = writeToMembersHere(buffer, from: trunk, kind: .media, now: now)
        if copies > 0 && forwardedReadTimes.count < forwardedReadTimes.capacity {
            forwardedReadTimes.append(now)
        }
    }

    @inline(__always)
    private func writeToMembersHere(_ buffer: ByteBuffer, from trunk: Trunk, kind: SentKind, now: UInt64) -> Int {
        guard socketDescriptor >= 0 else { return 0 }
        let receivers = trunk.forwarding.receivers
        return buffer.withUnsafeReadableBytes { packet in
            var copies = 0
            for receiver in receivers where !receiver.isTrunk {
                if enqueue(packet, to: receiver.destination, protector: receiver.protector, kind: kind, now: now) { copies += 1 }
            }
            return copies
        }
    }

    private func receiveTrunkRTCP(_ buffer: ByteBuffer, trunk: Trunk, now: UInt64) {
        switch buffer.withUnsafeReadableBytes({ TrunkRTCP.receive($0, from: trunk, now: now) }) {
        case let .dropped(reason):
            drop(reason)
        case let .accepted(forward):
            guard let forward else { return }
            var copy = ByteBufferAllocator().buffer(capacity: forward.count)
            copy.writeBytes(forward)
            _ = writeToMembersHere(copy, from: trunk, kind: .rtcp, now: now)
        }
    }

    private func receiveTrunkControl(_ buffer: ByteBuffer, trunk: Trunk, now: UInt64) {
        guard trunk.rtcpAndControlRate.allow(nowNanoseconds: now) else { return drop(.rateLimited) }
        guard let message = buffer.withUnsafeReadableBytes({ try? ControlMessage(parsing: $0) }) else { return drop(.malformed) }
        if message.isReliable { sendToTrunk(.ack(.init(sequence: message.sequence)), trunk: trunk) }
        switch message.body {
        case let .roster(page):
            guard let announced = trunk.remoteRoster.add(page) else { return }
            // A name from another relay is checked as a member's own is when it joins: one
            // with control, bidirectional or invisible formatting characters could have come
            // from no token, so it is left out rather than put on every member's screen.
            let members = announced.filter { ParleyNames.problem(withIdentity: $0.identity) == nil }
            if members.count < announced.count {
                drop(.malformed, count: announced.count - members.count)
                refusalLogs.log(.warning, "a relay of the room announced members whose names no token may carry; they are left out",
                                metadata: ["trunk": "\(trunk.logDescription)", "left out": "\(announced.count - members.count)"], now: now)
            }
            trunk.setRemoteMembers(members, limits: limits, now: now)
            let refused = rooms.setRemoteMembers(
                members, streams: trunk.remoteStreams, of: trunk, localKey: trunkDirectory?.localKeyBytes ?? [], now: now)
            for ssrc in refused {
                trunk.streams[ssrc] = nil
                logger.notice("a member behind a trunk has the SSRC of a member of a relay whose key sorts first; its relay sends it to join again",
                              metadata: ["trunk": "\(trunk.logDescription)", "ssrc": "\(ssrc)"])
            }
        case let .ack(ack):
            trunk.reliable.acknowledge(sequence: ack.sequence)
            trunk.unacknowledgedRosterPages.remove(ack.sequence)
            sendNextText(over: trunk, now: now)
        case let .text(text):
            // From a member behind the trunk, named by its relay; sent again if our ack was lost.
            guard message.isReliable, trunk.receivedReliable.insert(message.sequence) else { return }
            guard ParleyNames.problem(withIdentity: text.sender) == nil, ControlMessage.Text.problem(with: text.text) == nil else {
                return drop(.malformed)
            }
            metrics.texts[.relayed]?.increment()
            rooms.relayText(text.text, sender: text.sender, over: trunk)
        case let .moderate(request):
            // A moderator of the room on the peer relay asked; this relay acts on its members.
            guard message.isReliable, trunk.receivedReliable.insert(message.sequence) else { return }
            guard ParleyNames.problem(withIdentity: request.moderator) == nil else { return drop(.malformed) }
            let reply = rooms.moderate(request, in: trunk.room, by: request.moderator, now: now, passOn: false)
            metrics.moderation(request.action, from: .trunk, outcome: reply.outcome)
            if reply.outcome == .done {
                membershipLogs.log(.notice, "moderation from another relay of the room", metadata: [
                    "by": "\(request.moderator.logSafe())", "action": "\(request.action.label)", "target": "\(request.target.logSafe())",
                    "trunk": "\(trunk.logDescription)",
                ], now: now)
            }
        case let .mediaKeys(keys):
            // Sealed keys from a member behind the trunk for members here; opaque to both relays.
            guard message.isReliable, trunk.receivedReliable.insert(message.sequence) else { return }
            let undeliverable = rooms.relayMediaKeys(keys.entries, from: keys.sender, over: trunk)
            metrics.mediaKeys[.relayed]?.increment(by: keys.entries.count - undeliverable)
            metrics.mediaKeys[.undeliverable]?.increment(by: undeliverable)
        case let .ping(ping):
            sendToTrunk(.pong(.init(timestamp: ping.timestamp)), trunk: trunk)
        case .pong:
            break
        case .leave:
            endTrunk(trunk, reason: .closedByPeer, now: now, tellPeer: false)
        case let .goodbye(goodbye):
            endTrunk(trunk, reason: goodbye.reason == .relayShuttingDown ? .peerShuttingDown : .closedByPeer, now: now, tellPeer: false)
        default:
            // A member's messages (join, ready, redirects, …) mean nothing on a trunk.
            drop(.unexpectedControl)
        }
    }

    /// A text from a member here for the members behind the trunk: queued, sent reliably one
    /// at a time.
    func deliverTrunkText(_ trunk: Trunk, sender: String, text: String) {
        loop.execute {
            guard trunk.state == .open else { return }
            guard trunk.queuedTexts.count < Trunk.maximumQueuedTexts else {
                self.metrics.texts[.receiverQueueFull]?.increment()
                return
            }
            trunk.queuedTexts.append((sender, text))
            self.sendNextText(over: trunk, now: monotonicNanoseconds())
            self.flush()
        }
    }

    /// Sends the trunk's next queued text when none awaits the peer's acknowledgement (it was
    /// acknowledged, or given up after the reliable sender's attempts).
    func sendNextText(over trunk: Trunk, now: UInt64) {
        guard !trunk.queuedTexts.isEmpty, trunk.reliable.count(of: .text) == 0 else { return }
        let (sender, text) = trunk.queuedTexts.removeFirst()
        let sequence = trunk.takeSequence()
        guard let bytes = try? ControlMessage(sequence: sequence, isReliable: true,
                                              body: .text(ControlMessage.Text(number: sequence, sender: sender, text: text))).serialized() else { return }
        trunk.reliable.enqueue(sequence: sequence, kind: .text, bytes: bytes, nowNanoseconds: now)
        send(bytes, to: trunk.destination, protector: trunk.protector, kind: .control)
    }

    func deliverTrunkClosing(_ trunk: Trunk) {
        loop.execute {
            guard trunk.state == .open else { return }
            trunk.forwarding = .empty
            trunk.endsWhenSettled = true
        }
    }

    /// A moderation asked for here, passed on to the peer relay reliably.
    func deliverTrunkModeration(_ trunk: Trunk, request: ControlMessage.ModerationRequest) {
        loop.execute {
            guard trunk.state == .open, trunk.reliable.count(of: .moderation) < Trunk.maximumModerationsInFlight else { return }
            let sequence = trunk.takeSequence()
            guard let bytes = try? ControlMessage(sequence: sequence, isReliable: true, body: .moderate(request)).serialized() else { return }
            // Sent again for as long as a trunk waits before giving up on a silent peer, and more.
            trunk.reliable.enqueue(sequence: sequence, kind: .moderation, bytes: bytes, nowNanoseconds: monotonicNanoseconds(), attempts: 50)
            self.send(bytes, to: trunk.destination, protector: trunk.protector, kind: .control)
            self.flush()
        }
    }

    /// Sealed media keys from a member here for members behind the trunk, reliably.
    func deliverTrunkMediaKeys(_ trunk: Trunk, keys: ControlMessage.MediaKeys) {
        loop.execute {
            guard trunk.state == .open else { return }
            guard trunk.reliable.count(of: .mediaKeys) < Session.maximumMediaKeysInFlight else {
                self.metrics.mediaKeys[.receiverQueueFull]?.increment(by: keys.entries.count)
                return
            }
            let sequence = trunk.takeSequence()
            guard let bytes = try? ControlMessage(sequence: sequence, isReliable: true, body: .mediaKeys(keys)).serialized() else { return }
            trunk.reliable.enqueue(sequence: sequence, kind: .mediaKeys, bytes: bytes, nowNanoseconds: monotonicNanoseconds())
            self.send(bytes, to: trunk.destination, protector: trunk.protector, kind: .control)
            self.flush()
        }
    }

    func sendToTrunk(_ body: ControlMessage.Body, trunk: Trunk) {
        guard let bytes = try? ControlMessage(sequence: trunk.takeSequence(), body: body).serialized() else { return }
        send(bytes, to: trunk.destination, protector: trunk.protector, kind: .control)
    }

    /// The members here, to the peer, reliably (every page acknowledged).
    private func sendRoster(_ members: [ControlMessage.Roster.Member], version: UInt32, trunk: Trunk, now: UInt64) {
        trunk.lastSentRoster = members
        trunk.lastSentRosterVersion = version
        trunk.unacknowledgedRosterPages = []
        for page in ControlMessage.Roster.pages(version: version, members: members, maximumMessageSize: RelayCore.maximumRosterMessageSize) {
            let sequence = trunk.takeSequence()
            guard let bytes = try? ControlMessage(sequence: sequence, isReliable: true, body: .roster(page)).serialized() else { continue }
            trunk.reliable.enqueue(sequence: sequence, kind: .roster(version: page.version), bytes: bytes, nowNanoseconds: now)
            trunk.unacknowledgedRosterPages.insert(sequence)
            send(bytes, to: trunk.destination, protector: trunk.protector, kind: .control)
        }
    }

    // MARK: Room updates, the tick, the end

    /// The room changed: the trunk forwards to its new snapshot and tells the peer who is here.
    func applyTrunkUpdate(_ trunk: Trunk, snapshot: RoomSnapshot, version: UInt32, localRoster: [ControlMessage.Roster.Member]) {
        guard trunk.state == .open else { return }
        if trunk.forwarding === RoomSnapshot.empty || RoomSnapshot.isNewer(snapshot.version, than: trunk.forwarding.version) {
            trunk.forwarding = snapshot
        }
        let now = monotonicNanoseconds()
        trunk.localMemberCount = snapshot.localMemberCount
        if snapshot.localMemberCount > 0 {
            trunk.emptySinceNanoseconds = nil
        } else if trunk.emptySinceNanoseconds == nil {
            trunk.emptySinceNanoseconds = now
        }
        guard localRoster != trunk.lastSentRoster else { return }
        sendRoster(localRoster, version: version, trunk: trunk, now: now)
        flush()
    }

    /// Retransmissions, keepalive reports, and the trunks that went quiet or whose room emptied;
    /// on the first loop, the openings in progress too.
    func tickTrunks(now: UInt64) {
        guard let trunkDirectory else { return }
        if index == 0 {
            let (resend, failed) = trunkDirectory.dueOpenings(now: now)
            for opening in resend { send(opening.bytes, to: opening.destination, kind: .control) }
            for event in failed {
                logger.warning("\(event)")
                trunkDirectory.emit(event)
            }
        }
        guard !trunks.isEmpty else { return }
        let timings = trunkDirectory.timings
        let distrusted = trunkDirectory.keysDistrusted(longerThan: timings.distrustGrace, now: now)
        var ended: [(Trunk, TrunkEndReason)] = []
        for trunk in trunks.values {
            if !distrusted.isEmpty, distrusted.contains(trunk.peer.publicKey) {
                ended.append((trunk, .noLongerTrusted))
                continue
            }
            for bytes in trunk.reliable.due(nowNanoseconds: now) {
                send(bytes, to: trunk.destination, protector: trunk.protector, kind: .control)
            }
            sendNextText(over: trunk, now: now)
            if trunk.reliable.isEmpty, !trunk.unacknowledgedRosterPages.isEmpty, let members = trunk.lastSentRoster {
                sendRoster(members, version: trunk.lastSentRosterVersion, trunk: trunk, now: now)
            }
            if trunk.endsWhenSettled, trunk.reliable.count(of: .moderation) == 0 {
                ended.append((trunk, .closedHere))
            } else if now &- trunk.lastHeardNanoseconds > timings.timeout {
                ended.append((trunk, .timedOut))
            } else if let since = trunk.emptySinceNanoseconds, now &- since >= timings.emptyRoomGrace {
                ended.append((trunk, .roomEmptied))
            } else if now >= trunk.nextReportNanoseconds {
                trunk.nextReportNanoseconds = now &+ timings.keepalive
                if let report = TrunkRTCP.receiverReport(for: trunk, relaySSRC: relaySSRC, now: now) {
                    send(report, to: trunk.destination, protector: trunk.protector, kind: .rtcp)
                }
            }
        }
        for (trunk, reason) in ended { endTrunk(trunk, reason: reason, now: now) }
    }

    /// Ends a trunk here: out of its room and this loop, the peer told when it still listens,
    /// the event given. A trunk opened here that went quiet is opened again while its room
    /// has members here.
    func endTrunk(_ trunk: Trunk, reason: TrunkEndReason, now: UInt64, tellPeer: Bool? = nil) {
        guard trunk.state == .open else { return }
        trunk.state = .closed
        let tell = tellPeer ?? (reason != .timedOut && reason != .replaced)
        if tell {
            let body: ControlMessage.Body = reason == .shuttingDown
                ? .goodbye(.init(reason: .relayShuttingDown, message: "the relay is shutting down"))
                : .leave(.init())
            sendToTrunk(body, trunk: trunk)
        }
        if trunks[trunk.route] === trunk { trunks[trunk.route] = nil }
        rooms.detachTrunk(trunk, now: now)
        trunkDirectory?.unregister(trunk)
        let event = TrunkEvent(room: trunk.room, peer: trunk.peer, openedHere: trunk.openedHere, change: .ended(reason))
        logger.info("\(event)")
        trunkDirectory?.emit(event)
        if reason == .timedOut, trunk.openedHere, trunk.localMemberCount > 0, !isShuttingDown {
            beginTrunk(room: trunk.room, to: trunk.peer, destination: trunk.destination)
        }
        flush()
    }

    func deliverTrunkUpdate(_ trunk: Trunk, snapshot: RoomSnapshot, version: UInt32, localRoster: [ControlMessage.Roster.Member]) {
        loop.execute { self.applyTrunkUpdate(trunk, snapshot: snapshot, version: version, localRoster: localRoster) }
    }

    func deliverTrunkEnd(_ trunk: Trunk, reason: TrunkEndReason) {
        loop.execute { self.endTrunk(trunk, reason: reason, now: monotonicNanoseconds()) }
    }

    /// A member here lost its SSRC to a member on another relay: it is told to join again.
    func deliverEviction(_ session: Session) {
        loop.execute {
            guard session.state != .closed else { return }
            self.finishClosing(session, reason: .ssrcClash, now: monotonicNanoseconds(), tellMember: true)
            self.flush()
        }
    }
}
