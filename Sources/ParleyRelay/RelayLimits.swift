/// What the relay allows, sized by default for a 1–2 GB VPS. Every limit protects memory or
/// CPU from a member or a stranger; each has its own `--flag`, config key and variable.
public struct RelayLimits: Sendable, Hashable {
    /// Rooms open at once.
    public var maximumRooms = 500
    /// Members of one room, joining ones included.
    public var maximumMembersPerRoom = 50
    /// Media packets per second one member may send, averaged over the burst; 20 ms Opus is
    /// 50, 10 ms frames 100. RTCP and control count against ``controlPacketsPerSecondPerMember``.
    public var packetsPerSecondPerMember = 200
    /// Packets a member may send back to back above its rate (a burst after a network stall).
    public var packetBurstPerMember = 100
    /// Media bits per second one member may send, averaged over a second: with the packet
    /// rate alone, one member's 200 full-size packets a second reach 49 others as 118 Mbit/s.
    /// Opus tops out at 510 kbit/s; a voice call uses 24–64.
    public var maximumMemberBitsPerSecond = 640_000
    /// RTCP and control packets per second from one member, a budget apart from media so a
    /// stream of acknowledgements can never crowd out its audio (a client sends about 2).
    public var controlPacketsPerSecondPerMember = 50
    /// Joins per identity (in one room): a burst, then one every few seconds, so a token
    /// holder who re-joins in a loop cannot churn the room's roster or its members' sessions.
    public var joinBurstPerIdentity = 10
    public var joinsPerMinutePerIdentity = 20
    /// Largest datagram accepted: an Ethernet MTU; Parley's Opus packets are far smaller.
    public var maximumPacketSize = 1500
    /// How often a client should ping, told in `joined`.
    public var keepaliveIntervalMilliseconds = 5_000
    /// Silence after which a member is removed.
    public var idleTimeoutMilliseconds = 30_000
    /// A member that joined but never proved its address (`ready`) is dropped after this.
    public var pendingTimeoutMilliseconds = 10_000
    /// Error replies to strangers (not joined, encryption required), per second, for all
    /// sources together and for one source (an IPv4 address or IPv6 /64).
    public var errorRepliesPerSecond = 200
    public var errorRepliesPerSecondPerSource = 10
    /// Cookie replies to hellos, per loop and per source. A reply is smaller than its hello
    /// and costs one HMAC, so the overall rate is high: it only caps what a flood of forged
    /// hellos can make the relay send to the addresses they name.
    public var cookieRepliesPerSecond = 20_000
    public var cookieRepliesPerSecondPerSource = 20
    /// Join attempts that cost real work (a handshake with a valid cookie: two Diffie-Hellman
    /// operations; a plaintext join: a token check), per loop and per source. Charged only after
    /// the cookie checks out, so strangers who cannot receive at their address spend none of it.
    public var joinAttemptsPerSecond = 2_000
    public var joinAttemptsPerSecondPerSource = 10
    public var joinAttemptBurstPerSource = 30

    public init() {}

    /// Total sessions the relay can hold; bounds its memory.
    public var maximumSessions: Int { maximumRooms * maximumMembersPerRoom }

    /// Fails with a message naming the first value that is out of range.
    public func validate() throws(ConfigurationError) {
        try Self.check("max-rooms", maximumRooms, in: 1...100_000)
        try Self.check("max-members-per-room", maximumMembersPerRoom, in: 2...1_000)
        try Self.check("max-packet-rate", packetsPerSecondPerMember, in: 10...100_000)
        try Self.check("packet-burst", packetBurstPerMember, in: 1...100_000)
        try Self.check("max-member-bitrate", maximumMemberBitsPerSecond, in: 16_000...1_000_000_000)
        guard maximumMemberBitsPerSecond / 8 >= maximumPacketSize else {
            throw ConfigurationError("max-member-bitrate (\(maximumMemberBitsPerSecond) bit/s) must let a member send at least one packet of max-packet-size (\(maximumPacketSize) bytes) a second; raise it to \(maximumPacketSize * 8) or more")
        }
        try Self.check("max-packet-size", maximumPacketSize, in: 576...65_507)
        try Self.check("keepalive-interval (ms)", keepaliveIntervalMilliseconds, in: 100...600_000)
        try Self.check("idle-timeout (ms)", idleTimeoutMilliseconds, in: 500...3_600_000)
        guard idleTimeoutMilliseconds >= 2 * keepaliveIntervalMilliseconds else {
            throw ConfigurationError("idle-timeout (\(idleTimeoutMilliseconds) ms) must be at least twice keepalive-interval (\(keepaliveIntervalMilliseconds) ms), or members that only ping are dropped after one lost ping")
        }
        try Self.check("pending-timeout (ms)", pendingTimeoutMilliseconds, in: 100...600_000)
        guard maximumSessions <= 1_000_000 else {
            throw ConfigurationError("max-rooms × max-members-per-room is \(maximumSessions); keep it at most 1,000,000")
        }
    }

    static func check(_ name: String, _ value: Int, in range: ClosedRange<Int>) throws(ConfigurationError) {
        guard range.contains(value) else {
            throw ConfigurationError("\(name) is \(value); it must be from \(range.lowerBound) to \(range.upperBound)")
        }
    }
}
