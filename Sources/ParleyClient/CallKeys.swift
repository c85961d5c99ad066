/// The keys a person presses during a call on a terminal, read from raw bytes: a byte at a
/// time, arrows as their escape sequences (which may arrive split across reads).
public enum CallKey: Equatable, Sendable {
    case mute, deafen, pushToTalkMode, talk, louder, quieter, up, down, leave, help

    /// The help line: every key, in the words a person looks for.
    public static let helpLine = "m mute · d deafen · t push-to-talk on/off · space talk/stop · ↑↓ choose a person · +/- their volume · q leave · ? help"

    /// Splits a stream of terminal bytes into keys; bytes that are no key are dropped.
    public struct Reader: Sendable {
        private var escape: [UInt8] = []

        public init() {}

        public mutating func keys(from bytes: some Sequence<UInt8>) -> [CallKey] {
            var keys: [CallKey] = []
            for byte in bytes {
                if !escape.isEmpty {
                    escape.append(byte)
                    if escape.count == 2 {
                        if byte != UInt8(ascii: "[") && byte != UInt8(ascii: "O") { escape = [] }
                        continue
                    }
                    // ESC [ or ESC O, then parameters until a final byte (0x40–0x7E).
                    guard (0x40...0x7E).contains(byte) || escape.count > 8 else { continue }
                    switch byte {
                    case UInt8(ascii: "A"): keys.append(.up)
                    case UInt8(ascii: "B"): keys.append(.down)
                    default: break
                    }
                    escape = []
                    continue
                }
                switch byte {
                case 0x1B: escape = [byte]
                case UInt8(ascii: "m"), UInt8(ascii: "M"): keys.append(.mute)
                case UInt8(ascii: "d"), UInt8(ascii: "D"): keys.append(.deafen)
                case UInt8(ascii: "t"), UInt8(ascii: "T"): keys.append(.pushToTalkMode)
                case UInt8(ascii: " "): keys.append(.talk)
                case UInt8(ascii: "+"), UInt8(ascii: "="): keys.append(.louder)
                case UInt8(ascii: "-"), UInt8(ascii: "_"): keys.append(.quieter)
                case UInt8(ascii: "k"): keys.append(.up)
                case UInt8(ascii: "j"): keys.append(.down)
                case UInt8(ascii: "q"), UInt8(ascii: "Q"): keys.append(.leave)
                case UInt8(ascii: "?"), UInt8(ascii: "h"): keys.append(.help)
                default: break
                }
            }
            return keys
        }
    }
}

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
        case .help: return []
        }
    }

    /// The chosen person stays chosen while in the call; else the first of the others.
    private mutating func keepSelection(in others: [String]) {
        if let selected, others.contains(selected) { return }
        selected = others.first
    }
}
