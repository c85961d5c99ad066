/// A reception report block (RFC 3550 §6.4.1), carried in sender and receiver reports.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+
/// |                 SSRC_1 (SSRC of first source)                 |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | fraction lost |       cumulative number of packets lost       |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |           extended highest sequence number received           |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                      interarrival jitter                      |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                         last SR (LSR)                         |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                   delay since last SR (DLSR)                  |
/// +=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+
/// ```
public struct RTCPReportBlock: Sendable, Hashable {
    public static let size = 24

    public var ssrc: UInt32
    /// Packets lost since the previous report, as a fraction of 256.
    public var fractionLost: UInt8
    /// Packets lost since reception began; signed 24 bits (duplicates can make it negative).
    public var cumulativeLost: Int32
    public var extendedHighestSequence: UInt32
    /// Interarrival jitter in RTP timestamp units (RFC 3550 §6.4.1, A.8).
    public var jitter: UInt32
    /// The middle 32 bits of the NTP timestamp of the last SR received from this source, or 0.
    public var lastSenderReport: UInt32
    /// Time since that SR was received, in units of 1/65536 s, or 0.
    public var delaySinceLastSenderReport: UInt32

    public init(
        ssrc: UInt32,
        fractionLost: UInt8,
        cumulativeLost: Int32,
        extendedHighestSequence: UInt32,
        jitter: UInt32,
        lastSenderReport: UInt32 = 0,
        delaySinceLastSenderReport: UInt32 = 0
    ) {
        self.ssrc = ssrc
        self.fractionLost = fractionLost
        self.cumulativeLost = min(max(cumulativeLost, Self.cumulativeLostRange.lowerBound), Self.cumulativeLostRange.upperBound)
        self.extendedHighestSequence = extendedHighestSequence
        self.jitter = jitter
        self.lastSenderReport = lastSenderReport
        self.delaySinceLastSenderReport = delaySinceLastSenderReport
    }

    /// What the 24-bit signed field can hold; larger values are clamped, as RFC 3550 §6.4.1 asks.
    public static let cumulativeLostRange: ClosedRange<Int32> = -0x80_0000...0x7F_FFFF

    /// The loss fraction as a number from 0 to 1.
    public var lossFraction: Double { Double(fractionLost) / 256 }

    /// Round-trip time seen by the source that sent the SR this block answers (RFC 3550 §6.4.1,
    /// "A - LSR - DLSR"), in units of 1/65536 s; nil when the block does not answer an SR.
    public func roundTripTime(arrival: NTPTimestamp) -> UInt32? {
        guard lastSenderReport != 0 else { return nil }
        let rtt = arrival.middle32 &- lastSenderReport &- delaySinceLastSenderReport
        // A negative result (clock skew or a bogus block) wraps to a huge value: reject it.
        return rtt < 0x8000_0000 ? rtt : nil
    }

    init(reading reader: inout ByteReader) throws(WireError) {
        ssrc = try reader.readUInt32()
        fractionLost = try reader.readUInt8()
        let lost = try reader.readUInt24()
        cumulativeLost = Int32(bitPattern: lost << 8) >> 8  // sign-extend 24 bits
        extendedHighestSequence = try reader.readUInt32()
        jitter = try reader.readUInt32()
        lastSenderReport = try reader.readUInt32()
        delaySinceLastSenderReport = try reader.readUInt32()
    }

    func write(to writer: inout ByteWriter) throws(WireError) {
        try writer.write(ssrc)
        try writer.write(fractionLost)
        try writer.writeUInt24(UInt32(bitPattern: cumulativeLost) & 0xFF_FFFF)
        try writer.write(extendedHighestSequence)
        try writer.write(jitter)
        try writer.write(lastSenderReport)
        try writer.write(delaySinceLastSenderReport)
    }
}

extension ByteReader {
    /// Reads `count` report blocks, then whatever remains as profile-specific extension bytes.
    mutating func readReportBlocks(count: UInt8) throws(WireError) -> [RTCPReportBlock] {
        var blocks: [RTCPReportBlock] = []
        blocks.reserveCapacity(Int(count))
        for _ in 0..<count { blocks.append(try RTCPReportBlock(reading: &self)) }
        return blocks
    }
}
