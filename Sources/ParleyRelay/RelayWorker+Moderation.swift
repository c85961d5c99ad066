import ParleyWire

/// A member's moderation request: the sender's `mod` claim is checked here, on its loop, at
/// no more cost than any control message; only a moderator's request reaches the rooms' lock
/// (``RelayCore/moderate(_:in:by:now:)``). Every request gets one answer, repeated for a
/// repeated request, and is counted by outcome.
extension RelayWorker {
    func receiveModeration(_ request: ControlMessage.ModerationRequest, sequence: UInt32, from session: Session, now: UInt64) {
        guard session.state == .active else { return drop(.unexpectedControl) }
        session.lastHeardNanoseconds = now
        if let last = session.lastModeration, last.sequence == sequence {
            return send(last.answer, to: session, kind: .control)
        }
        let reply: ControlMessage.ModerationReply
        if !session.isModerator {
            reply = .init(outcome: .notModerator, message: "your token does not make you a moderator of \(session.room); "
                + "ask whoever runs the relay for one minted with `parley-relay token --moderator`")
            refusalLogs.log(.notice, "moderation refused: not a moderator", metadata: [
                "member": "\(session.logDescription)", "action": "\(request.action.label)",
            ], now: now)
        } else if !session.moderationRate.allow(nowNanoseconds: now) {
            reply = .init(outcome: .rateLimited, message: "too many moderation requests; wait a second and try again")
        } else {
            reply = rooms.moderate(request, in: session.room, by: session.identity, now: now, passOn: true)
            if reply.outcome == .done {
                membershipLogs.log(.notice, "moderation", metadata: [
                    "by": "\(session.logDescription)", "action": "\(request.action.label)", "target": "\(request.target.logSafe())",
                ], now: now)
            }
        }
        metrics.moderation(request.action, from: .member, outcome: reply.outcome)
        // Closing its own room removed the moderator too: the answer still goes to its address.
        guard let bytes = try? ControlMessage(sequence: sequence, body: .moderationReply(reply)).serialized() else { return }
        session.lastModeration = (sequence, bytes)
        send(bytes, to: session, kind: .control)
        flush()
    }
}
