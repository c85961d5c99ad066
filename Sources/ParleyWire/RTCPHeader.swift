/// The header every RTCP packet starts with (RFC 3550 §6.4.1), and the packet types Parley knows.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |V=2|P|  count  |      PT       |             length            |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// `count` is the report count (SR, RR), source count (SDES, BYE) or feedback
/// message type (RTPFB, PSFB). `length` is the packet's size in 32-bit words minus one.
public enum RTCPPacketType {
    public static let senderReport: UInt8 = 200
    public static let receiverReport: UInt8 = 201
    public static let sourceDescription: UInt8 = 202
    public static let goodbye: UInt8 = 203
    public static let application: UInt8 = 204
    /// Transport-layer feedback (RFC 4585 §6.2); generic NACK is FMT 1.
    public static let transportFeedback: UInt8 = 205
    public static let payloadFeedback: UInt8 = 206
}

/// A packet's body, the bytes after its common header, with the header fields that
/// describe it. Each RTCP packet type reads itself from one of these.
public struct RTCPBody {
    /// The 5-bit count field of the common header.
    public let count: UInt8
    public let packetType: UInt8
    /// The bytes after the common header, padding removed.
    public let bytes: UnsafeRawBufferPointer
}

/// What each RTCP packet type provides to the compound packet reader and writer.
public protocol RTCPPacketBody: Sendable, Hashable {
    static var packetType: UInt8 { get }
    static var element: WireElement { get }
    /// The 5-bit count field this packet writes (report count, source count or FMT).
    var countField: UInt8 { get throws(WireError) }
    /// Bytes after the common header; a multiple of 4.
    var bodySize: Int { get }
    init(_ body: RTCPBody) throws(WireError)
    func writeBody(to writer: inout ByteWriter) throws(WireError)
}

extension RTCPPacketBody {
    /// Header plus body.
    public var serializedSize: Int { 4 + bodySize }

    /// Writes the common header then the body.
    public func write(to writer: inout ByteWriter) throws(WireError) {
        let count = try countField
        guard count <= 31 else { throw .malformed(Self.element, reason: "count field exceeds 31") }
        let words = serializedSize / 4 - 1
        guard serializedSize % 4 == 0, words <= Int(UInt16.max) else {
            throw .malformed(Self.element, reason: "packet too long for the RTCP length field")
        }
        try writer.write(RTPHeader.version << 6 | count)
        try writer.write(Self.packetType)
        try writer.write(UInt16(words))
        try writeBody(to: &writer)
    }
}

/// A 64-bit NTP timestamp (RFC 3550 §4): seconds since 1900 in the high 32 bits, fraction below.
public struct NTPTimestamp: Sendable, Hashable, Comparable {
    public var rawValue: UInt64

    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// Seconds between 1900-01-01 (NTP's epoch) and 1970-01-01 (Unix's).
    public static let unixEpochOffset: UInt64 = 2_208_988_800

    /// The NTP time of a Unix time given in nanoseconds.
    public init(unixNanoseconds: UInt64) {
        let seconds = unixNanoseconds / 1_000_000_000 + Self.unixEpochOffset
        let nanos = unixNanoseconds % 1_000_000_000
        let fraction = (nanos << 32) / 1_000_000_000
        self.rawValue = seconds << 32 | fraction
    }

    /// The middle 32 bits, the form RTCP's LSR field and RTT arithmetic use (units of 1/65536 s).
    public var middle32: UInt32 { UInt32(truncatingIfNeeded: rawValue >> 16) }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}
