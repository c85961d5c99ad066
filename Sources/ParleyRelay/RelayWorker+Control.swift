import NIOCore
import ParleyWire

/// Control messages: from members (ready, ping, ack, leave; state and text go on to
/// `RelayWorker+Room.swift`), from strangers (joins go on to
/// `RelayWorker+Joining.swift`; anything else is told it is not a member, within the
/// stranger's budget and never in more bytes than it sent), and from members just departed.
extension RelayWorker {
    /// A control message from a member; `receivedSize` is the datagram's size on the wire, what
    /// an answer to it may not exceed.
    func receiveControl(_ buffer: ByteBuffer, from session: Session, receivedSize size: Int, now: UInt64) {
        let parsed = buffer.withUnsafeReadableBytes { raw -> ControlMessage? in try? ControlMessage(parsing: raw) }
        guard let message = parsed else { return drop(.malformed) }
        handleControl(message, from: session, receivedSize: size, now: now)
    }

    /// A member's control message, read from its datagram or (a browser member's) handed over
    /// by its page's signalling.
    func handleControl(_ message: ControlMessage, from session: Session, receivedSize size: Int, now: UInt64) {
        if case .join = message.body {
            // On a secure relay joins come inside a handshake, never inside a session; a
            // browser's came as its offer.
            guard !session.protector.isSecure, session.browser == nil else { return drop(.unexpectedControl) }
            // Joins are handled even over the rate: a client retransmits them with backoff.
            return receiveJoin(message, size: size, from: session.address, peer: session.peer, existing: session, now: now)
        }
        guard session.rtcpAndControlRate.allow(nowNanoseconds: now) else { return drop(.rateLimited) }
        switch message.body {
        case let .ready(ready):
            guard ready.cookie == session.cookie else { return drop(.unexpectedControl) }
            session.lastHeardNanoseconds = now
            if session.state == .joining {
                activate(session, now: now)
            } else {
                // The roster is on its way; a ready retransmitted before it arrived needs nothing more.
                resendReliable(session, now: now, force: true)
            }
        case let .ping(ping):
            session.lastHeardNanoseconds = now
            sendControl(.pong(ControlMessage.Pong(timestamp: ping.timestamp)), sequence: message.sequence, to: session, limit: size)
        case let .ack(ack):
            session.lastHeardNanoseconds = now
            acknowledge(ack.sequence, from: session, now: now)
        case .leave:
            // An ack is larger than a leave, so an address that never proved itself gets none.
            if session.state == .active {
                sendControl(.ack(ControlMessage.Ack(sequence: message.sequence)), sequence: 0, to: session, limit: nil)
            }
            membershipLogs.log(.info, "member left", metadata: ["member": "\(session.logDescription)"], now: now)
            remove(session, reason: .left, now: now)
        case .pong:
            session.lastHeardNanoseconds = now
        case let .memberState(update):
            session.lastHeardNanoseconds = now
            receiveMemberState(update, sequence: message.sequence, from: session, now: now)
        case let .text(text):
            session.lastHeardNanoseconds = now
            receiveText(text, sequence: message.sequence, from: session, now: now)
        case let .moderate(request):
            receiveModeration(request, sequence: message.sequence, from: session, now: now)
        case let .mediaKeys(keys):
            session.lastHeardNanoseconds = now
            receiveMediaKeys(keys, sequence: message.sequence, from: session, now: now)
        case .join, .joined, .roster, .error, .goodbye, .moderationReply, .redirect:
            drop(.unexpectedControl)
        }
    }

    /// The member has a reliable message: it is not sent again, and a text's successor may go.
    func acknowledge(_ sequence: UInt32, from session: Session, now: UInt64) {
        session.reliable.acknowledge(sequence: sequence)
        if sequence == session.texts.inFlight { textSettled(session, now: now) }
    }

    // MARK: Strangers

    func receiveStrangerControl(_ buffer: ByteBuffer, from address: DatagramAddress, peer: PeerAddress, now: UInt64) {
        let size = buffer.readableBytes
        let parsed = buffer.withUnsafeReadableBytes { raw -> ControlMessage? in try? ControlMessage(parsing: raw) }
        guard let message = parsed else { return drop(.malformed) }
        switch message.body {
        case .join:
            receiveJoin(message, size: size, from: address, peer: peer, existing: nil, now: now)
        case .leave, .ack:
            guard departures[peer] != nil else { return drop(.notJoined) }
            receiveDepartedControl(message, peer: peer, address: address)
        case .ready, .ping:
            drop(.notJoined)
            answerStranger(peer, address: address, receivedSize: size, echo: [], now: now)
        case .joined, .roster, .pong, .error, .goodbye, .moderate, .moderationReply, .redirect, .memberState, .text, .mediaKeys:
            drop(.notJoined)
        }
    }

    /// A retransmitted leave whose ack was lost, or the ack of a goodbye: the address was
    /// proven before the member left, so answering it is safe.
    func receiveDepartedControl(_ message: ControlMessage, peer: PeerAddress, address: DatagramAddress) {
        guard let departure = departures[peer] else { return drop(.notJoined) }
        switch message.body {
        case .leave:
            guard let bytes = try? ControlMessage(body: .ack(ControlMessage.Ack(sequence: message.sequence))).serialized() else { return }
            send(bytes, to: address, protector: departure.protector, kind: .control)
        case let .ack(ack):
            departures.acknowledge(peer, sequence: ack.sequence)
        default:
            drop(.notJoined)
        }
    }

    /// Tells a stranger it is not a member, so a client whose relay restarted rejoins at once;
    /// never with more bytes than it sent, and rate-limited per source and overall. `echo`
    /// (the tag of the sealed packet answered) lets the client know the reply is about its own packet.
    func answerStranger(_ peer: PeerAddress, address: DatagramAddress, receivedSize: Int, echo: [UInt8], now: UInt64) {
        guard peer.canBeAnswered, budgets.errorReplies.allow(peer.host, nowNanoseconds: now) else { return }
        sendError(.notJoined, "not a member here: join again (the relay may have restarted)", echo: echo, to: address, limit: receivedSize)
    }
}
