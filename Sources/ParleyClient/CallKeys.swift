import ParleyWire

/// The keys a person presses during a call on a terminal, read from raw bytes: a byte at a
/// time, arrows as their escape sequences (which may arrive split across reads), after `:` a
/// typed request (`:volume bob 50`, Enter), the words `parley ctl` takes, and after `/` a
/// text message to the room (`/back in 5`, Enter). Escape gives up what is being typed.
public enum CallKey: Equatable, Sendable {
    case mute, deafen, pushToTalkMode, talk, louder, quieter, up, down, leave, help
    /// The safety number shared with the person chosen (end-to-end encrypted rooms).
    case verify
    /// A typed request, as typed (Enter sends it).
    case command(String)
    /// A typed text message for the room.
    case message(String)

    /// The help line: every key, in the words a person looks for.
    public static let helpLine = "m mute · d deafen · t push-to-talk on/off · space talk/stop · ↑↓ choose a person · +/- their volume · v their safety number · q leave · /message to the room · :request (as parley ctl) · ? help"

    /// Splits a stream of terminal bytes into keys; bytes that are no key are dropped.
    public struct Reader: Sendable {
        private var escape: [UInt8] = []
        private var typed: [UInt8]?
        /// Whether what is typed is a message (after `/`) rather than a request (after `:`).
        private var typingMessage = false
        /// Continuation bytes still to come of the character being typed, and whether they
        /// are kept (it fits) or dropped (it would cross the limit).
        private var continuation = (count: 0, kept: false)

        public init() {}

        /// What is being typed after `:` or `/`, for the screen to show; nil when nothing is.
        public var typing: String? { typed.map { String(decoding: $0, as: UTF8.self) } }
        /// What the line being typed starts with on the screen: `:` or `/`.
        public var prompt: String { typingMessage ? "/" : ":" }
        /// The most a line may hold, in bytes of UTF-8: what is sent is what the limit allows,
        /// so typing stops there, at a whole character.
        public var limit: Int { typingMessage ? ControlMessage.Text.maximumBytes : CallControl.maximumLineBytes }
        /// Bytes that may still be typed; nil when nothing is being typed.
        public var bytesLeft: Int? { typed.map { max(0, limit - $0.count) } }

        public mutating func keys(from bytes: some Sequence<UInt8>) -> [CallKey] {
            var keys: [CallKey] = []
            for byte in bytes {
                if var line = typed {
                    switch byte {
                    case 0x0D, 0x0A:
                        typed = nil
                        let text = String(decoding: line, as: UTF8.self)
                        keys.append(typingMessage ? .message(text) : .command(text))
                    case 0x1B, 0x03: typed = nil  // Escape gives up the request
                    case 0x7F, 0x08:
                        if line.isEmpty { typed = nil } else {
                            // Back over one whole character, however many bytes it took.
                            while let last = line.popLast(), last & 0xC0 == 0x80 {}
                            typed = line
                        }
                    case 0x80...0xBF:
                        // The rest of a character: kept with its first byte, or dropped with it.
                        guard continuation.count > 0 else { break }
                        continuation.count -= 1
                        if continuation.kept { line.append(byte) }
                        typed = line
                    case 0x20...0x7E, 0xC0...0xFF:
                        let length = byte < 0x80 ? 1 : byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : 2
                        let fits = line.count + length <= limit
                        if fits { line.append(byte) }
                        continuation = (length - 1, fits)
                        typed = line
                    default: break
                    }
                    continue
                }
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
                case UInt8(ascii: "v"), UInt8(ascii: "V"): keys.append(.verify)
                case UInt8(ascii: ":"):
                    typed = []
                    typingMessage = false
                case UInt8(ascii: "/"):
                    typed = []
                    typingMessage = true
                default: break
                }
            }
            return keys
        }
    }
}
