/// What the relay allows, sized by default for a 1–2 GB VPS. Every limit protects memory or
/// CPU from a member or a stranger; each has its own `--flag`, config key and variable.
public struct RelayLimits: Sendable, Hashable {
    /// Rooms open at once.
    public var maximumRooms = 500
    /// Members of one room, joining ones included.
    public var maximumMembersPerRoom = 50
    /// Packets per second one member may send (media, RTCP and control together), averaged
    /// over the burst; 20 ms Opus is 50, 10 ms frames 100, plus RTCP and pings.
    public var packetsPerSecondPerMember = 200
    /// Packets a member may send back to back above its rate (a burst after a network stall).
    public var packetBurstPerMember = 100
    /// Largest datagram accepted: an Ethernet MTU; Parley's Opus packets are far smaller.
    public var maximumPacketSize = 1500
    /// How often a client should ping, told in `joined`.
    public var keepaliveIntervalMilliseconds = 5_000
    /// Silence after which a member is removed.
    public var idleTimeoutMilliseconds = 30_000
    /// A member that joined but never proved its address (`ready`) is dropped after this.
    public var pendingTimeoutMilliseconds = 10_000
    /// Error replies to strangers, per second, for all sources together and for one source.
    public var errorRepliesPerSecond = 200
    public var errorRepliesPerSecondPerSource = 2

    public init() {}

    /// Total sessions the relay can hold; bounds its memory.
    public var maximumSessions: Int { maximumRooms * maximumMembersPerRoom }

    /// Fails with a message naming the first value that is out of range.
    public func validate() throws(ConfigurationError) {
        try Self.check("max-rooms", maximumRooms, in: 1...100_000)
        try Self.check("max-members-per-room", maximumMembersPerRoom, in: 2...1_000)
        try Self.check("max-packet-rate", packetsPerSecondPerMember, in: 10...100_000)
        try Self.check("packet-burst", packetBurstPerMember, in: 1...100_000)
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
