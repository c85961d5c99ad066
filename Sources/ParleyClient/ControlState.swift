import ParleyWire

/// Whether this member's microphone goes out and whether they hear the room, as the person
/// set it: muted, deafened, push-to-talk. Plain values; `CallShared` holds the call's copy so
/// the capture thread reads it with the media gate, under the same lock, once a frame.
public struct ControlState: Equatable, Sendable, Codable {
    public var muted = false
    /// Deafened members hear nothing and send nothing, whatever `muted` says; undeafening
    /// gives back the mute they had.
    public var deafened = false
    /// In push-to-talk mode the microphone goes out only while the key is held (`talking`).
    public var pushToTalk = false
    public var talking = false

    public init() {}

    /// Whether the capture thread sends the next frame.
    public var transmits: Bool { !muted && !deafened && (!pushToTalk || talking) }

    /// Applies a control that changes this state; a control about something else leaves it.
    /// Returns the words a person reads about the change.
    public mutating func apply(_ control: CallControl) -> String? {
        switch control {
        case .mute: muted = true
        case .unmute: muted = false
        case .deafen: deafened = true
        case .undeafen: deafened = false
        case let .pushToTalkMode(on):
            pushToTalk = on
            talking = false
        // A press or release means push-to-talk (a desktop hotkey sends only these), so it
        // turns the mode on: after a release the microphone stays closed.
        case .pushToTalkPress:
            pushToTalk = true
            talking = true
        case .pushToTalkRelease:
            pushToTalk = true
            talking = false
        case .volume, .say, .leave, .status, .moderate, .verify, .trust: return nil
        }
        return summary
    }

    /// What the others are shown of this member: muted whenever the microphone does not go
    /// out (push-to-talk and not talking included), and deafened.
    public var memberState: ControlMessage.MemberState {
        var state: ControlMessage.MemberState = []
        if !transmits { state.insert(.muted) }
        if deafened { state.insert(.deafened) }
        return state
    }

    /// `muted`, `deafened`, `push-to-talk: talking`, `live`.
    public var summary: String {
        if deafened { return "deafened" }
        if muted { return "muted" }
        if pushToTalk { return talking ? "push-to-talk: talking" : "push-to-talk: not talking" }
        return "live"
    }
}
