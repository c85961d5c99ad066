import ParleyBasics
import Synchronization

/// The call's answer to its link's events: the first join starts the audio, a rejoin or a
/// redirect is told to the person, a failure or the end of a leave ends `wait()`, texts and
/// moderation answers are kept or handed on, and the person is told when a moderator mutes
/// or unmutes them.
extension CallSession {
    /// What the link reports, on the network loop: tell the person, keep it, or wake the
    /// call's `wait()`.
    func handle(_ event: LinkEvent) {
        switch event {
        case let .joined(identity, room, canPublish, rejoin):
            let first = lifecycle.withLock { state -> Bool in
                guard state.joinedAt == nil else { return false }
                state.joinedAt = MonotonicClock.now()
                return true
            }
            if first {
                let encrypted = status.snapshot.endToEnd.map { " · end-to-end encrypted (your fingerprint \($0.ownFingerprint))" } ?? ""
                notice("joined room \(room) as \(identity)\(encrypted)\(canPublish ? "" : " (listen only: your token does not allow speaking)")")
                startAudio()
            } else if rejoin {
                notice("rejoined room \(room); audio resumes")
            }
        case let .reconnecting(reason):
            notice("reconnecting: \(reason)…")
        case let .redirected(relay):
            notice("the room lives on the relay at \(relay); joining there")
        case let .failed(failure):
            lifecycle.withLock { if $0.failure == nil { $0.failure = .link(failure) } }
            wake.signal()
        case .left:
            lifecycle.withLock { $0.left = true }
            wake.signal()
        case let .text(sender, text):
            let message = RoomText(sender: sender, text: text, atSeconds: secondsIntoCall(), outgoing: false)
            keep(message)
            onText(message)
        case let .textRefused(text, reason):
            notice("the relay refused your message \"\(text.logSafe(limit: 40))\": \(reason.logSafe(limit: 200))")
        case let .moderationAnswered(sequence, reply):
            moderationAnswers.deliver(reply, for: sequence)
        case let .roster(members):
            let muted = lifecycle.withLock { state -> Bool? in
                guard let identity = status.snapshot.identity else { return nil }
                let now = members.contains { $0.identity == identity && $0.isServerMuted }
                defer { state.serverMuted = now }
                return now == state.serverMuted ? nil : now
            }
            if let muted {
                notice(muted ? "muted by the room's moderator: nobody hears you until they unmute you"
                             : "the room's moderator unmuted you: the others hear you again")
            }
        case let .endToEnd(event):
            notice(Self.words(for: event))
        case .roundTrip, .mediaKeys:
            break
        }
    }

    /// What an end-to-end notice tells the person: what happened, and what to do.
    static func words(for notice: EndToEndNotice) -> String {
        switch notice {
        case let .keyChanged(identity):
            let name = identity.logSafe(limit: 64)
            return "WARNING: \(name)'s identity key is not the one you met in this room before: \(name) on a new device, "
                + "or someone standing in between. \(name) gets no key from you and nothing they send plays, until you compare "
                + "safety numbers (`parley ctl verify \(name)`, or v on the call screen) and accept it (`parley ctl trust \(name)`)"
        case let .keyAccepted(identity):
            return "you accepted \(identity.logSafe(limit: 64))'s new identity key: they get your key and you hear them"
        case let .viewDiffers(identity, theirCount, ourCount):
            let name = identity.logSafe(limit: 64)
            return "WARNING: \(name) gave their key to a room of \(theirCount) members, but the relay shows you \(ourCount): "
                + "someone you cannot see may be listening. Compare safety numbers with \(name) (`parley ctl verify \(name)`), "
                + "and leave the call if you cannot account for it"
        case let .viewAgrees(identity):
            return "\(identity.logSafe(limit: 64)) sees the same room as you again"
        case let .cannotTakePart(identity):
            return "\(identity.logSafe(limit: 64))'s client takes no part in end-to-end encryption: they hear nothing of the room, "
                + "and nothing of theirs plays"
        }
    }
}
