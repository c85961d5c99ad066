import ParleyWire

/// What members tell the room besides audio: their muted/deafened state (``MemberStatePacer``,
/// then the roster) and text messages (``MemberTexts``, handed to the room through
/// ``RoomMembership/relayText(_:from:)`` and delivered here, one at a time, to each member).
extension RelayWorker {
    // MARK: State

    func receiveMemberState(_ update: ControlMessage.MemberStateUpdate, sequence: UInt32, from session: Session, now: UInt64) {
        sendControl(.ack(ControlMessage.Ack(sequence: sequence)), sequence: 0, to: session, limit: nil)
        guard session.memberState.receive(update) else { return }
        applyMemberState(session, now: now)
    }

    /// Tells the room the member's newest state if its rate allows; else holds it for a tick.
    func applyMemberState(_ session: Session, now: UInt64) {
        if let state = session.memberState.due(nowNanoseconds: now) {
            rooms.setState(state, of: session, now: now)
        }
        heldBackStates[session.peer] = session.memberState.isHeldBack ? session : nil
    }

    func applyHeldBackStates(now: UInt64) {
        for session in heldBackStates.values {
            if session.state == .closed {
                if heldBackStates[session.peer] === session { heldBackStates[session.peer] = nil }
                continue
            }
            applyMemberState(session, now: now)
        }
    }

    // MARK: Text from a member

    /// Relayed once, or refused with an error that says why (answering the text's sequence
    /// number, so the client knows which message it is about); a repeat gets the same answer.
    func receiveText(_ text: ControlMessage.Text, sequence: UInt32, from session: Session, now: UInt64) {
        guard session.state == .active else { return drop(.unexpectedControl) }
        guard let (answer, isRepeat) = session.texts.receive(text, nowNanoseconds: now) else {
            return sendControl(.ack(ControlMessage.Ack(sequence: sequence)), sequence: 0, to: session, limit: nil)
        }
        switch answer {
        case .relayed:
            sendControl(.ack(ControlMessage.Ack(sequence: sequence)), sequence: 0, to: session, limit: nil)
            guard !isRepeat else { return }
            metrics.texts[.relayed]?.increment()
            rooms.relayText(text.text, from: session)
        case let .refused(outcome, reason):
            let code: ControlMessage.ErrorCode = outcome == .refusedRate ? .rateLimited : .malformedRequest
            sendControl(.error(ControlMessage.ErrorReply(code: code, message: reason)), sequence: sequence, to: session, limit: nil)
            guard !isRepeat else { return }
            metrics.texts[outcome]?.increment()
        }
    }

    // MARK: Sealed media keys (end-to-end encrypted rooms)

    /// Sealed media keys from a member for others of its room: acknowledged (the client sends
    /// them again until it is), then handed to each recipient, within the member's budget. The
    /// relay reads only the SSRCs it routes by; the keys inside are sealed to the recipients.
    func receiveMediaKeys(_ keys: ControlMessage.MediaKeys, sequence: UInt32, from session: Session, now: UInt64) {
        guard session.state == .active, session.isEndToEndEncrypted else { return drop(.unexpectedControl) }
        sendControl(.ack(ControlMessage.Ack(sequence: sequence)), sequence: 0, to: session, limit: nil)
        // A retransmission whose ack was lost is acknowledged again, not delivered twice.
        guard session.receivedMediaKeys.insert(sequence) else { return }
        guard session.mediaKeyRate.allow(cost: keys.entries.count, nowNanoseconds: now) else {
            metrics.mediaKeys[.refusedRate]?.increment(by: keys.entries.count)
            return drop(.rateLimited)
        }
        let undeliverable = rooms.relayMediaKeys(keys.entries, from: session)
        metrics.mediaKeys[.relayed]?.increment(by: keys.entries.count - undeliverable)
        metrics.mediaKeys[.undeliverable]?.increment(by: undeliverable)
    }

    func deliverMediaKeys(_ session: Session, entry: ControlMessage.MediaKeys.Entry, from sender: UInt32) {
        loop.execute {
            guard session.state == .active else { return }
            let waiting = session.pendingMediaKeys.count + session.reliable.count(of: .mediaKeys) * ControlMessage.MediaKeys.maximumEntries
            guard waiting < Session.maximumMediaKeysInFlight else {
                self.metrics.mediaKeys[.receiverQueueFull]?.increment()
                return
            }
            // To a member, each entry names its sender (the recipient is the member itself).
            session.pendingMediaKeys.append(ControlMessage.MediaKeys.Entry(ssrc: sender, package: entry.package))
            if session.pendingMediaKeys.count >= ControlMessage.MediaKeys.maximumEntries {
                self.sendPendingMediaKeys(to: session, now: monotonicNanoseconds())
                self.flush()
            } else {
                self.pendingMediaKeys[session.peer] = session
            }
        }
    }

    /// Sends the member's gathered keys, as few reliable messages as fit a datagram.
    func sendPendingMediaKeys(to session: Session, now: UInt64) {
        guard session.state == .active else {
            session.pendingMediaKeys = []
            return
        }
        var entries = session.pendingMediaKeys[...]
        session.pendingMediaKeys = []
        while !entries.isEmpty {
            var batch: [ControlMessage.MediaKeys.Entry] = []
            var size = 0
            while let next = entries.first, batch.count < ControlMessage.MediaKeys.maximumEntries,
                  batch.isEmpty || size + 6 + next.package.count <= Self.mediaKeysMessageBudget {
                batch.append(next)
                size += 6 + next.package.count
                entries = entries.dropFirst()
            }
            let sequence = session.takeSequence()
            guard let bytes = try? ControlMessage(sequence: sequence, isReliable: true, body: .mediaKeys(.init(entries: batch))).serialized() else { continue }
            session.reliable.enqueue(sequence: sequence, kind: .mediaKeys, bytes: bytes, nowNanoseconds: now)
            awaitingAcknowledgement[session.peer] = session
            send(bytes, to: session, kind: .control)
        }
    }

    /// The entries of one media-keys message to a member: well inside a datagram.
    static let mediaKeysMessageBudget = 1_000

    // MARK: Text to a member

    func deliverText(_ session: Session, sender: String, text: String) {
        loop.execute {
            guard session.state == .active else { return }
            if !session.texts.enqueue(sender: sender, text: text) { self.metrics.texts[.receiverQueueFull]?.increment() }
            self.sendNextText(to: session, now: monotonicNanoseconds())
            self.flush()
        }
    }

    /// Sends the member its next queued text, if none is in flight.
    func sendNextText(to session: Session, now: UInt64) {
        guard session.state == .active, session.texts.inFlight == nil, session.texts.hasQueued else { return }
        let sequence = session.takeSequence()
        guard let text = session.texts.next(sequence: sequence),
              let bytes = try? ControlMessage(sequence: sequence, isReliable: true, body: .text(text)).serialized() else { return }
        session.reliable.enqueue(sequence: sequence, kind: .text, bytes: bytes, nowNanoseconds: now)
        awaitingAcknowledgement[session.peer] = session
        send(bytes, to: session, kind: .control)
    }

    /// The member acknowledged the text in flight: the next may go.
    func textSettled(_ session: Session, now: UInt64) {
        session.texts.settled()
        sendNextText(to: session, now: now)
    }

    /// ``ReliableSender`` gave up the text in flight (the member heard none of its attempts):
    /// the next goes, and the idle timeout decides about the member.
    func settleTextIfGivenUp(_ session: Session, now: UInt64) {
        guard let sequence = session.texts.inFlight, !session.reliable.outstanding.contains(where: { $0.sequence == sequence }) else { return }
        textSettled(session, now: now)
    }
}
