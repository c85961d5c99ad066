/// Room control: a moderator's requests (server-mute, unmute, kick, close the room) and the
/// relay's answer to each.
///
/// ```
/// moderate (type 32), client → relay, and relay → relay over a trunk; the header's sequence
/// names the request:
///   action (1) | target identity (string8; empty for closeRoom) | ban seconds (4) | reason (string8)
///   [ | moderator identity (string8) ]   only over a trunk: who asked, at the other relay
/// moderation reply (type 33), relay → client; the header's sequence is the request's:
///   outcome (1) | message (string8)
/// ```
///
/// The client sends a request unreliably and repeats it, with the same sequence number,
/// until the reply arrives; the relay answers a repeat with the reply it already gave, so a
/// kick retransmitted after its first copy was acted on is not refused as "nobody called bob".
extension ControlMessage {
    public struct ModerationRequest: Sendable, Hashable {
        public var action: ModerationAction
        /// The member acted on; empty for ``ModerationAction/closeRoom``.
        public var target: String
        /// For a kick: how long the member may not rejoin; 0 asks for the relay's default.
        public var banSeconds: UInt32
        /// For a kick or closing the room: what the member is told, in the moderator's words.
        public var reason: String
        /// Who asked, when a relay passes the request on to another relay of the room over a
        /// trunk (the member removed there is told the name); empty from a client, and a
        /// relay ignores it from one (it knows who asked).
        public var moderator: String

        /// The longest reason a moderator may give, in UTF-8 bytes: it travels inside the
        /// removed member's goodbye with the moderator's name and the ban's length.
        public static let maximumReasonBytes = 160
        /// How long a kick keeps a member out when the moderator names no duration.
        public static let defaultBanSeconds: UInt32 = 300
        /// The longest ban: long enough for any call, short enough that a ban nobody meant to
        /// keep does not outlive the day's tokens by much.
        public static let maximumBanSeconds: UInt32 = 7 * 86_400

        public init(action: ModerationAction, target: String = "", banSeconds: UInt32 = 0, reason: String = "", moderator: String = "") {
            self.action = action
            self.target = target
            self.banSeconds = banSeconds
            self.reason = reason
            self.moderator = moderator
        }

        var serializedSize: Int { 1 + 1 + target.utf8.count + 4 + 1 + reason.utf8.count + (moderator.isEmpty ? 0 : 1 + moderator.utf8.count) }

        init(reading reader: inout ByteReader) throws(WireError) {
            action = ModerationAction(wireValue: try reader.readUInt8())
            target = try reader.readString8()
            banSeconds = try reader.readUInt32()
            reason = try reader.readString8()
            moderator = reader.isAtEnd ? "" : try reader.readString8()
        }

        func write(to writer: inout ByteWriter) throws(WireError) {
            try writer.write(action.rawValue)
            try writer.writeString8(target, element: .controlMessage)
            try writer.write(banSeconds)
            try writer.writeString8(reason, element: .controlMessage)
            if !moderator.isEmpty { try writer.writeString8(moderator, element: .controlMessage) }
        }
    }

    public enum ModerationAction: UInt8, Sendable, Hashable, CaseIterable {
        /// The relay drops the member's audio until unmuted; the roster shows it.
        case serverMute = 1
        case serverUnmute
        /// The member is removed and may not rejoin for the ban's length.
        case kick
        /// Everyone is removed; the room is gone until someone joins it again.
        case closeRoom
        /// An action this build does not know (a newer client's); the relay refuses it.
        case unknown = 0xFF

        public init(wireValue: UInt8) { self = ModerationAction(rawValue: wireValue) ?? .unknown }

        /// For metrics labels and logs.
        public var label: String {
            switch self {
            case .serverMute: return "server_mute"
            case .serverUnmute: return "server_unmute"
            case .kick: return "kick"
            case .closeRoom: return "close_room"
            case .unknown: return "unknown"
            }
        }
    }

    public struct ModerationReply: Sendable, Hashable {
        public var outcome: ModerationOutcome
        /// For people: what was done, or why not and what to do; fitted to a one-byte length
        /// (``ControlMessage/fitted(_:)``).
        public var message: String { didSet { message = ControlMessage.fitted(message) } }

        public init(outcome: ModerationOutcome, message: String) {
            self.outcome = outcome
            self.message = ControlMessage.fitted(message)
        }

        var serializedSize: Int { 1 + 1 + message.utf8.count }

        init(reading reader: inout ByteReader) throws(WireError) {
            outcome = ModerationOutcome(wireValue: try reader.readUInt8())
            message = try reader.readString8()
        }

        func write(to writer: inout ByteWriter) throws(WireError) {
            try writer.write(outcome.rawValue)
            try writer.writeString8(message, element: .controlMessage)
        }
    }

    public enum ModerationOutcome: UInt8, Sendable, Hashable, CaseIterable {
        case done = 0
        /// The sender's token carries no moderator claim.
        case notModerator
        /// Nobody of that identity is in the room.
        case noSuchMember
        /// The request cannot be carried out as asked (a bad reason or duration, an unknown action).
        case invalid
        /// Too many requests from this member.
        case rateLimited
        case unknown = 0xFF

        public init(wireValue: UInt8) { self = ModerationOutcome(rawValue: wireValue) ?? .unknown }

        /// For metrics labels.
        public var label: String {
            switch self {
            case .done: return "done"
            case .notModerator: return "not_moderator"
            case .noSuchMember: return "no_such_member"
            case .invalid: return "invalid"
            case .rateLimited: return "rate_limited"
            case .unknown: return "unknown"
            }
        }
    }
}
