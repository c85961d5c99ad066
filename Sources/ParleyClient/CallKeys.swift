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
