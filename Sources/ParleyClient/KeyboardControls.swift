/// What each key does, given the call as it is: the person chosen with ↑↓ (whose volume
/// +/- change), and the controls the keys toggle. Plain values, so it is tested without a
/// terminal.
public struct KeyboardControls: Sendable {
    /// The person ↑↓ chose, by identity.
    public private(set) var selected: String?
    /// Volume steps, percent.
    public static let volumeStep = 10

    public init() {}

    /// The requests `key` makes of the call; `others` are the other members in the order the
    /// roster shows them, `volume` tells a person's current volume.
    public mutating func requests(for key: CallKey, state: ControlState, others: [String], volume: (String) -> Int) -> [CallControl] {
        keepSelection(in: others)
        switch key {
        case .mute: return [state.muted ? .unmute : .mute]
        case .deafen: return [state.deafened ? .undeafen : .deafen]
        case .pushToTalkMode: return [.pushToTalkMode(!state.pushToTalk)]
        case .talk:
            // A terminal never sees a key go up, so space latches: once to talk, again to stop.
            guard state.pushToTalk else { return [.pushToTalkMode(true)] }
            return [state.talking ? .pushToTalkRelease : .pushToTalkPress]
        case .louder, .quieter:
            guard let selected else { return [] }
            let step = key == .louder ? Self.volumeStep : -Self.volumeStep
            let percent = min(CallControl.maximumVolumePercent, max(0, volume(selected) + step))
            return [.volume(person: selected, percent: percent)]
        case .up, .down:
            guard !others.isEmpty else { return [] }
            let index = selected.flatMap { others.firstIndex(of: $0) } ?? (key == .down ? -1 : others.count)
            selected = others[(index + (key == .down ? 1 : -1) + others.count) % others.count]
            return []
        case .leave: return [.leave]
        case .verify: return [.verify(person: selected)]
        case .help: return []
        case let .command(line): return (try? CallControl(parsing: line)).map { [$0] } ?? []
        case let .message(text): return [.say(text)]
        }
    }

    /// The chosen person stays chosen while in the call; else the first of the others.
    private mutating func keepSelection(in others: [String]) {
        if let selected, others.contains(selected) { return }
        selected = others.first
    }
}
