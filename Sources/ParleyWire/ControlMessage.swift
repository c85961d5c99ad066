/// Parley's control messages: join, roster, keepalive, errors. They share the relay's
/// single UDP port with RTP and RTCP, starting with a byte RTP can never start with
/// (see ``PacketKind``).
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  magic 0x50   |  version = 1  |     type      |     flags     |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                       sequence number                         |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                    body (depends on type)                   ...
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// Flag bit 0 ("reliable") asks the receiver to answer with an ``Ack`` naming the
/// sequence number; the sender retransmits with the same number until it does, and
/// the receiver acts on each number once. Join and ready are retransmitted until
/// their answer (joined, roster) arrives instead.
///
/// Strings are UTF-8 after a one-byte length (`string8`) or two-byte length (`string16`).
///
/// A client says what it can receive beyond plain Opus (``Capabilities``) in a byte after
/// its join's software name, where older clients left zeros (padding, which older relays
/// ignore); the relay passes each member's on in the roster's member flags (bits 1–7),
/// which older clients ignore. So a sender uses what every listener in the roster can read,
/// and a client or relay that predates a capability simply never advertises it.
///
/// The exchange:
///
/// ```
/// client                                   relay
///   | join(ssrc, room, token) ≥ 512 bytes ->  |   retransmitted until answered
///   | <- joined(cookie, …) ≤ the join's size  |   or error(code, message)
///   | ready(cookie) ------------------------> |   proves the client receives at its address
///   | <- roster (reliable), then media ------ |   nothing else is sent before ready
///   | ping(t) -> / <- pong(t)                 |   every keepalive interval; RTT; NAT bindings
///   | leave (reliable) ---------------------> |
///   | <- goodbye(reason) (reliable)           |   relay shutting down, idle, replaced, kicked, room closed
///   | moderate(action, target) -------------> |   a moderator's request, repeated until answered
///   | <- moderation reply(outcome, message)   |
/// ```
public struct ControlMessage: Sendable, Hashable {
    public static let magic: UInt8 = 0x50
    public static let version: UInt8 = 1
    /// Bytes before the body.
    public static let headerSize = 8
    /// Joins are padded to at least this size, so that the relay's answers before the
    /// client proves its address (joined, error) are never larger than what it received.
    public static let minimumJoinSize = 512

    /// The most a one-byte length field holds: a name, a reason, a relay's words to a member.
    public static let maximumShortTextBytes = 255

    /// `text` cut at a character boundary to fit a one-byte length field. The words of every
    /// answer a relay sends (an error, a goodbye, a moderation reply) are fitted here, once:
    /// a moderator's name and reason in three-byte characters run past 255 bytes in fewer
    /// than 200 characters, and an answer that did not fit was not sent at all.
    public static func fitted(_ text: String) -> String { text.prefix(utf8Bytes: maximumShortTextBytes) }

    public var sequence: UInt32
    /// Whether the sender wants an ``Ack``.
    public var isReliable: Bool
    public var body: Body

    public init(sequence: UInt32 = 0, isReliable: Bool = false, body: Body) {
        self.sequence = sequence
        self.isReliable = isReliable
        self.body = body
    }

    public enum Body: Sendable, Hashable {
        case join(Join)
        case joined(Joined)
        case ready(Ready)
        case roster(Roster)
        case leave(Leave)
        case ping(Ping)
        case pong(Pong)
        case ack(Ack)
        case error(ErrorReply)
        case goodbye(Goodbye)
        case moderate(ModerationRequest)
        case moderationReply(ModerationReply)
        case redirect(Redirect)
        case memberState(MemberStateUpdate)
        case text(Text)
        case mediaKeys(MediaKeys)

        public var type: MessageType {
            switch self {
            case .join: return .join
            case .joined: return .joined
            case .ready: return .ready
            case .roster: return .roster
            case .leave: return .leave
            case .ping: return .ping
            case .pong: return .pong
            case .ack: return .ack
            case .error: return .error
            case .goodbye: return .goodbye
            case .moderate: return .moderate
            case .moderationReply: return .moderationReply
            case .redirect: return .redirect
            case .memberState: return .memberState
            case .text: return .text
            case .mediaKeys: return .mediaKeys
            }
        }
    }

    public enum MessageType: UInt8, Sendable, Hashable {
        case join = 1, joined, ready, roster, leave, ping, pong, ack, error, goodbye, redirect
        /// Room control (`ControlMessage+Moderation.swift`), numbered apart from the rest.
        case moderate = 32, moderationReply
        /// What members tell the room (`ControlMessage+Room.swift`): numbered from 48, a block
        /// of their own, apart from the session's messages and room control's.
        case memberState = 48, text
        /// Sealed media keys of an end-to-end encrypted room (`ControlMessage+EndToEnd.swift`).
        case mediaKeys
    }

    /// What a member can receive beyond plain Opus, as its join says and the roster repeats.
    public struct Capabilities: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        /// RFC 2198 redundant audio around Opus (``REDPayload``, ``RTPHeader/redPayloadType``).
        public static let redundantAudio = Capabilities(rawValue: 1 << 0)
        /// Text messages from the room (``Text``).
        public static let textMessages = Capabilities(rawValue: 1 << 1)
        /// End-to-end encryption: the member seals its frames (SFrame) and takes part in the
        /// room's key exchange (``MediaKeys``); its join carries an identity key.
        public static let endToEndEncryption = Capabilities(rawValue: 1 << 2)
        /// What this build can receive.
        public static let supported: Capabilities = [.redundantAudio, .textMessages, .endToEndEncryption]
        /// The most the roster's member flags carry (6 bits: bit 7 is the server-mute).
        static let rosterMask: UInt8 = 0x3F
    }

    // MARK: Bodies

    /// Client → relay: asks to join the room its token names, publishing `ssrc`.
    public struct Join: Sendable, Hashable {
        /// The SSRC the client will send from; the relay refuses one already in use in the room.
        public var ssrc: UInt32
        /// The room the client means to join; must equal the token's room.
        public var room: String
        /// The access token, opaque to the client (see `parley-relay token`).
        public var token: String
        /// The client software, e.g. "parley/0.1.0", for the relay's logs.
        public var software: String
        /// What the client can receive; empty from clients that predate the field.
        public var capabilities: Capabilities
        /// The member's long-term identity key (X25519, 32 bytes), which others seal their
        /// media keys to; empty from clients that take no part in end-to-end encryption.
        public var identityKey: [UInt8]

        public init(ssrc: UInt32, room: String, token: String, software: String, capabilities: Capabilities = [], identityKey: [UInt8] = []) {
            self.ssrc = ssrc
            self.room = room
            self.token = token
            self.software = software
            self.capabilities = capabilities
            self.identityKey = identityKey
        }
    }

    /// Relay → client: the join was accepted.
    public struct Joined: Sendable, Hashable {
        /// A random value the client echoes in ``Ready`` to prove it receives at its address.
        public var cookie: UInt64
        public var ssrc: UInt32
        /// The identity the token names.
        public var identity: String
        public var room: String
        public var canPublish: Bool
        /// The room is end-to-end encrypted (permissions bit 1): every member seals its frames
        /// with its own media key, which only members hold.
        public var isEndToEndEncrypted: Bool
        /// How often the client should ping, in milliseconds.
        public var keepaliveIntervalMilliseconds: UInt32
        /// Silence after which the relay removes a member, in milliseconds.
        public var idleTimeoutMilliseconds: UInt32
        /// Other relays of the relay's cluster, to try if it falls silent (after the other
        /// fields; none from a relay on its own, or one that predates clusters).
        public var clusterRelays: [ClusterRelay]

        public init(
            cookie: UInt64, ssrc: UInt32, identity: String, room: String, canPublish: Bool, isEndToEndEncrypted: Bool = false,
            keepaliveIntervalMilliseconds: UInt32, idleTimeoutMilliseconds: UInt32, clusterRelays: [ClusterRelay] = []
        ) {
            self.clusterRelays = clusterRelays
            self.isEndToEndEncrypted = isEndToEndEncrypted
            self.cookie = cookie
            self.ssrc = ssrc
            self.identity = identity
            self.room = room
            self.canPublish = canPublish
            self.keepaliveIntervalMilliseconds = keepaliveIntervalMilliseconds
            self.idleTimeoutMilliseconds = idleTimeoutMilliseconds
        }
    }

    /// Client → relay: echoes the cookie from ``Joined``.
    public struct Ready: Sendable, Hashable {
        public var cookie: UInt64
        public init(cookie: UInt64) { self.cookie = cookie }
    }

    /// Relay → client: who is in the room, identity ↔ SSRC. Sent after ready and after every
    /// join and leave. A roster too large for one datagram is split into pages that share a version.
    public struct Roster: Sendable, Hashable {
        public struct Member: Sendable, Hashable {
            public var ssrc: UInt32
            public var identity: String
            public var canPublish: Bool
            /// What the member can receive (6 bits of it travel).
            public var capabilities: Capabilities
            /// A moderator muted the member: the relay drops its audio (flag bit 7, which
            /// older clients read as a capability they do not know, and ignore).
            public var isServerMuted: Bool
            /// Muted, deafened, as the member last told the relay (empty from older relays).
            public var state: MemberState
            /// The identity key its join carried (empty: none, or an older relay).
            public var identityKey: [UInt8]

            public init(ssrc: UInt32, identity: String, canPublish: Bool, capabilities: Capabilities = [], isServerMuted: Bool = false,
                        state: MemberState = [], identityKey: [UInt8] = []) {
                self.ssrc = ssrc
                self.identity = identity
                self.canPublish = canPublish
                self.capabilities = Capabilities(rawValue: capabilities.rawValue & Capabilities.rosterMask)
                self.isServerMuted = isServerMuted
                self.state = state
                self.identityKey = identityKey
            }

            static let serverMutedFlag: UInt8 = 0x80

            /// Its entry, its byte in the state block and its key in the key block.
            var serializedSize: Int { 4 + 1 + 1 + identity.utf8.count + 1 + 1 + identityKey.count }
        }

        /// Increases with every change; a client ignores pages older than what it has.
        public var version: UInt32
        public var pageIndex: UInt8
        public var pageCount: UInt8
        public var members: [Member]

        public init(version: UInt32, pageIndex: UInt8 = 0, pageCount: UInt8 = 1, members: [Member]) {
            self.version = version
            self.pageIndex = pageIndex
            self.pageCount = pageCount
            self.members = members
        }

        /// Splits `members` into pages whose serialised message is at most `maximumMessageSize` bytes.
        public static func pages(version: UInt32, members: [Member], maximumMessageSize: Int) -> [Roster] {
            let budget = maximumMessageSize - ControlMessage.headerSize - 7
            var pages: [[Member]] = [[]]
            var used = 0
            for member in members {
                if used + member.serializedSize > budget, !pages[pages.count - 1].isEmpty {
                    pages.append([])
                    used = 0
                }
                pages[pages.count - 1].append(member)
                used += member.serializedSize
            }
            let count = UInt8(clamping: pages.count)
            return pages.prefix(Int(count)).enumerated().map { index, members in
                Roster(version: version, pageIndex: UInt8(index), pageCount: count, members: members)
            }
        }
    }

    /// Client → relay: the member leaves.
    public struct Leave: Sendable, Hashable {
        public init() {}
    }

    /// Either side: keepalive and round-trip measurement; the peer echoes `timestamp` in ``Pong``.
    public struct Ping: Sendable, Hashable {
        /// Opaque to the receiver; the sender's clock reading, in nanoseconds.
        public var timestamp: UInt64
        public init(timestamp: UInt64) { self.timestamp = timestamp }
    }

    public struct Pong: Sendable, Hashable {
        public var timestamp: UInt64
        public init(timestamp: UInt64) { self.timestamp = timestamp }
    }

    /// Acknowledges the reliable message with this sequence number.
    public struct Ack: Sendable, Hashable {
        public var sequence: UInt32
        public init(sequence: UInt32) { self.sequence = sequence }
    }

    /// Relay → client: a request failed. The message is for people; the code is for programs.
    ///
    /// An error the relay sends in plaintext, outside any session (`notJoined` to a sealed
    /// packet from an address it does not know, `encryptionUnavailable` to a hello), is not
    /// authenticated: anyone can send one with the relay's address. So it carries `echo`,
    /// bytes of the datagram it answers that only someone who saw that datagram can know (the
    /// sealed packet's tag, the hello's nonce), and a client acts on none without it.
    public struct ErrorReply: Sendable, Hashable {
        public var code: ErrorCode
        /// For people; fitted to a one-byte length (``ControlMessage/fitted(_:)``).
        public var message: String { didSet { message = ControlMessage.fitted(message) } }
        /// At most ``maximumEchoSize`` bytes of the datagram this answers; empty when the reply
        /// needs no binding (it travels inside a session or a handshake response).
        public var echo: [UInt8]

        public static let maximumEchoSize = 32

        public init(code: ErrorCode, message: String, echo: [UInt8] = []) {
            self.code = code
            self.message = ControlMessage.fitted(message)
            self.echo = echo
        }
    }

    public enum ErrorCode: UInt16, Sendable, Hashable, CaseIterable {
        case tokenMalformed = 1
        case tokenSignatureInvalid
        case tokenExpired
        case tokenNotYetValid
        case tokenWrongRoom
        case roomFull
        case tooManyRooms
        case ssrcInUse
        case notJoined
        case rateLimited
        case unsupportedVersion
        case publishNotAllowed
        case malformedRequest
        /// The token's identity (`sub`) breaks the rules of ``ParleyNames``.
        case tokenIdentityInvalid
        /// The relay accepts only the encrypted handshake; the client sent a plaintext join.
        case encryptionRequired
        /// The relay runs without encryption (`--insecure`); the client asked for a handshake.
        case encryptionUnavailable
        /// A relay of a cluster could not place the room now (its store is unreachable, or no
        /// relay is free); the client tries again a little later.
        case placementUnavailable
        /// The room is end-to-end encrypted and the join cannot take part (a client that
        /// predates it, or one without an identity key), or the join's token asks for end-to-end
        /// encryption in a room already running without it.
        case endToEndEncryptionRequired
        /// A moderator removed this identity from the room, and the ban has not yet run out.
        case kickedFromRoom = 32
        /// A code this build does not know; carried so that newer relays stay readable.
        case unknown = 0xFFFF

        public init(wireValue: UInt16) { self = ErrorCode(rawValue: wireValue) ?? .unknown }
    }

    /// Relay → client: the relay ends the member's session.
    public struct Goodbye: Sendable, Hashable {
        public var reason: GoodbyeReason
        /// For people; fitted to a one-byte length (``ControlMessage/fitted(_:)``).
        public var message: String { didSet { message = ControlMessage.fitted(message) } }

        public init(reason: GoodbyeReason, message: String) {
            self.reason = reason
            self.message = ControlMessage.fitted(message)
        }
    }

    public enum GoodbyeReason: UInt8, Sendable, Hashable, CaseIterable {
        /// The relay is stopping (SIGTERM); the client should rejoin after it returns.
        case relayShuttingDown = 1
        /// Nothing arrived from the member within the idle timeout.
        case idleTimeout
        /// Another session with the same identity joined the room.
        case replaced
        /// A moderator (or the relay's operator) removed the member; the message says who,
        /// why and for how long.
        case kicked
        /// A moderator (or the relay's operator) closed the room, removing everyone.
        case roomClosed
        case unknown = 0xFF

        public init(wireValue: UInt8) { self = GoodbyeReason(rawValue: wireValue) ?? .unknown }
    }
}

// MARK: - Reading and writing
