/// What members tell the room besides their audio: whether they are muted or deafened, and
/// short text messages.
///
/// ```
/// member state (client → relay, reliable):   revision (4) | state (1)
/// text (both ways, reliable):                number (4) | sender (string8) | text (string16)
/// roster, after its members:                 one state byte per member, in their order
/// ```
///
/// A member's state travels to the relay with a revision that counts up with each change, so
/// a retransmission that arrives after a newer state never undoes it; the relay keeps the
/// newest and repeats it in the roster. Old clients stop reading a roster after its members,
/// so the state bytes behind them cost them nothing, and a roster from an old relay, which
/// has none, reads as everyone's state unknown (empty).
///
/// A text is numbered by whoever sends that copy: the client numbers its own messages, the
/// relay numbers what it delivers to each member. Each side sends one text at a time and the
/// next only once the last is acknowledged, so a receiver that acts on numbers it has not
/// seen yet shows every message once and in the order sent. Only members whose join offered
/// ``ControlMessage/Capabilities/textMessages`` are sent texts: an older client would not
/// understand them, never acknowledge, and be sent them again and again.
extension ControlMessage {
    /// A member's own state as the others see it. The relay sets no bit of its own here; bits
    /// 2–7 are free for states the relay decides (a moderator's mute) or later ones.
    public struct MemberState: OptionSet, Sendable, Hashable, Codable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        /// The member's microphone does not go out: muted, or push-to-talk and not talking.
        public static let muted = MemberState(rawValue: 1 << 0)
        /// The member hears nothing (and, deafened, sends nothing either).
        public static let deafened = MemberState(rawValue: 1 << 1)

        /// `deafened`, `muted` or `live`, the words a roster shows.
        public var summary: String {
            if contains(.deafened) { return "deafened" }
            if contains(.muted) { return "muted" }
            return "live"
        }
    }

    /// Client → relay: the member's state is now `state`.
    public struct MemberStateUpdate: Sendable, Hashable {
        /// Counts up with each change (wrapping); the relay ignores a revision not newer than
        /// the one it has.
        public var revision: UInt32
        public var state: MemberState

        public init(revision: UInt32, state: MemberState) {
            self.revision = revision
            self.state = state
        }
    }

    /// A short message to everyone else in the room.
    public struct Text: Sendable, Hashable {
        /// The sender's number for this copy (see the layout above).
        public var number: UInt32
        /// Who wrote it: empty from a client (the relay knows who sent it), the member's
        /// identity from the relay.
        public var sender: String
        public var text: String

        /// The longest text, in bytes of UTF-8: a few sentences, and a datagram that never
        /// needs fragmenting, whatever the identity in front of it.
        public static let maximumBytes = 500

        public init(number: UInt32, sender: String = "", text: String) {
            self.number = number
            self.sender = sender
            self.text = text
        }

        /// Why `text` cannot be sent, in words for the person who typed it; nil when it can.
        /// The relay applies the same rule, so what a client lets through the relay delivers.
        public static func problem(with text: String) -> String? {
            let size = text.utf8.count
            if text.unicodeScalars.allSatisfy(\.properties.isWhitespace) { return "the message is empty" }
            if size > maximumBytes {
                return "the message is \(size) bytes; the most is \(maximumBytes) bytes of UTF-8 (about \(maximumBytes) letters of English): shorten it or send it in parts"
            }
            if let scalar = text.unicodeScalars.first(where: { $0.properties.generalCategory == .control || $0 == "\u{2028}" || $0 == "\u{2029}" }) {
                let hex = String(scalar.value, radix: 16, uppercase: true)
                return "the message contains a control character or line break (U+\(String(repeating: "0", count: max(0, 4 - hex.count)) + hex)); send one line of plain text"
            }
            return nil
        }
    }

    // MARK: Reading and writing (called from ControlMessage+Wire.swift)

    static func readMemberStateUpdate(_ reader: inout ByteReader) throws(WireError) -> MemberStateUpdate {
        MemberStateUpdate(revision: try reader.readUInt32(), state: MemberState(rawValue: try reader.readUInt8()))
    }

    static func write(_ update: MemberStateUpdate, to writer: inout ByteWriter) throws(WireError) {
        try writer.write(update.revision)
        try writer.write(update.state.rawValue)
    }

    /// A text's size is checked against ``Text/maximumBytes`` where it is acted on (the relay
    /// answers an oversized one with an error that says so), not here: the datagram already
    /// bounds it, and a reader that refused it could not say why.
    static func readText(_ reader: inout ByteReader) throws(WireError) -> Text {
        let number = try reader.readUInt32()
        let sender = try reader.readString8()
        return Text(number: number, sender: sender, text: try reader.readString16())
    }

    static func write(_ text: Text, to writer: inout ByteWriter) throws(WireError) {
        try writer.write(text.number)
        try writer.writeString8(text.sender, element: .controlMessage)
        try writer.writeString16(text.text, element: .controlMessage)
    }

    static func serializedSize(of text: Text) -> Int { 4 + 1 + text.sender.utf8.count + 2 + text.text.utf8.count }

    /// The roster's state block: absent from older relays (everyone's state stays empty); when
    /// present, one byte for each member.
    static func readRosterStates(_ reader: inout ByteReader, into members: inout [Roster.Member]) throws(WireError) {
        guard !reader.isAtEnd else { return }
        for index in members.indices {
            members[index].state = MemberState(rawValue: try reader.readUInt8())
        }
    }

    static func writeRosterStates(_ members: [Roster.Member], to writer: inout ByteWriter) throws(WireError) {
        for member in members { try writer.write(member.state.rawValue) }
    }
}
