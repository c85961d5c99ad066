import Foundation
import ParleyBasics
import Synchronization

/// The call's controls: what a key or `parley ctl` asks (mute, deafen, push-to-talk, a
/// speaker's volume, a text, a moderator's request, the status), served at once from any
/// thread, and the control socket `parley ctl` reaches them through.
extension CallSession {
    /// Opens the control socket. Without it the call still works (the keys do too), so a
    /// failure is a notice, not an end.
    func startControls() {
        guard let path = configuration.controlSocketPath else { return }
        do {
            try ControlSocketPath(directory: (path as NSString).deletingLastPathComponent).prepare()
            let server = try ControlServer.start(path: path) { [weak self] control in
                self?.perform(control) ?? .refused("the call has ended")
            }
            controlServer.withLock { $0 = server }
        } catch {
            notice("no control socket, so `parley ctl` cannot reach this call: \(error)")
        }
    }

    /// Does what a key or `parley ctl` asks, at once, from any thread; the reply says what
    /// changed (`muted`, `bob at 50%`) or why nothing did, and for `.status` carries the figures.
    public func perform(_ control: CallControl) -> CallControlReply {
        switch control {
        case .mute, .unmute, .deafen, .undeafen, .pushToTalkMode, .pushToTalkPress, .pushToTalkRelease:
            let (summary, controls) = gate.update { state in (state.controls.apply(control) ?? "", state.controls) }
            mix.setDeafened(controls.deafened)
            connection.setMemberState(controls.memberState)
            return .done(summary)
        case let .say(text):
            switch connection.say(text) {
            case .success:
                keep(RoomText(sender: status.snapshot.identity ?? "you", text: text, atSeconds: secondsIntoCall(), outgoing: true))
                return .done("sent to the room")
            case let .failure(refusal):
                return .refused(refusal.description)
            }
        case let .volume(person, percent):
            let state = status.snapshot
            let heard = Set(mix.levels(now: 0).keys)
            guard state.members.contains(person) || heard.contains(person) else {
                return .refused(CallControlError.unknownPerson(person, members: state.members.filter { $0 != state.identity }).description)
            }
            mix.setVolume(identity: person, percent: percent)
            return .done("\(person) at \(percent)%")
        case .leave:
            stop()
            return .done("leaving")
        case .status:
            return CallControlReply(ok: true, message: gate.snapshot.controls.summary, status: statistics())
        case let .verify(person):
            guard let endToEnd = status.snapshot.endToEnd else {
                return .refused("this room is not end-to-end encrypted: there is no key to verify")
            }
            return Self.verification(endToEnd, person: person)
        case let .trust(person):
            guard status.snapshot.endToEnd != nil else { return .refused("this room is not end-to-end encrypted: there is no key to trust") }
            guard connection.trust(person) else {
                let names = status.snapshot.endToEnd?.members.map(\.identity) ?? []
                return .refused(CallControlError.unknownPerson(person, members: names).description)
            }
            return .done("\(person)'s key is accepted and pinned: they get your key and you hear them")
        case let .moderate(request):
            guard let sequence = connection.moderate(request) else {
                return .refused("the call is not in the room right now (joining or reconnecting), or \(PendingModeration.maximumOutstanding) requests still wait for the relay; try again in a moment")
            }
            // The link answers every request within its give-up time; this wait only guards against a stuck loop.
            guard let reply = moderationAnswers.wait(for: sequence, seconds: Double(PendingModeration.giveUpNanoseconds) / 1e9 + 2) else {
                return .refused("no answer from the call's network loop")
            }
            return reply.outcome == .done ? .done(reply.message) : .refused(reply.message)
        }
    }

    /// Muted, deafened, push-to-talk, now.
    public var controls: ControlState { gate.snapshot.controls }

    /// Keeps a text in the call's record (the status and `--stats-json`), the newest ``RoomText/kept``.
    func keep(_ message: RoomText) {
        status.update { state in
            state.texts.append(message)
            if state.texts.count > RoomText.kept { state.texts.removeFirst(state.texts.count - RoomText.kept) }
        }
    }

    /// Seconds since the call first joined (0 before), for the time of a text.
    func secondsIntoCall() -> Double {
        lifecycle.withLock { $0.joinedAt }.map { Double(MonotonicClock.now() &- $0) / 1e9 } ?? 0
    }

    /// The words of `verify`: each person's safety number with you, to read aloud to each other
    /// (on the phone, in person: not in the call itself, whose voices a relay in between could
    /// not fake, but whose silence could), and what Parley knows of their key.
    static func verification(_ status: EndToEndStatus, person: String?) -> CallControlReply {
        let people = status.members.filter { person == nil || $0.identity == person }
        guard !people.isEmpty else {
            if let person {
                return .refused(CallControlError.unknownPerson(person, members: status.members.map(\.identity)).description)
            }
            return .done("nobody else is in the room; your fingerprint is \(status.ownFingerprint)")
        }
        var lines = ["your fingerprint: \(status.ownFingerprint). Read the safety number aloud with each person; if both of you see the same digits, nobody stands between you."]
        for member in people {
            let name = member.identity.logSafe(limit: 64)
            guard let number = member.safetyNumber, let fingerprint = member.fingerprint else {
                lines.append("\(name): takes no part in end-to-end encryption (hears nothing of the room)")
                continue
            }
            let state: String
            switch member.key {
            case .new: state = "first met now, pinned"
            case .known: state = "the key you met before"
            case .changed: state = "CHANGED since you last met: refused until you `parley ctl trust \(name)`"
            case .none: state = "no key"
            }
            lines.append("\(name) (\(fingerprint), \(state)): \(number)")
            if let warning = member.seesAnotherRoom { lines.append("  WARNING: \(name) \(warning)") }
        }
        return .done(lines.joined(separator: "\n"))
    }
}
