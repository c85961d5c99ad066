/// A sender report, RTCP packet type 200 (RFC 3550 §6.4.1).
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |V=2|P|    RC   |   PT=SR=200   |             length            |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                         SSRC of sender                        |
/// +=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+
/// |              NTP timestamp, most significant word             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |             NTP timestamp, least significant word             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                         RTP timestamp                         |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                     sender's packet count                     |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                      sender's octet count                     |
/// +=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+
/// |                 report blocks (RC × 24 bytes)                 |
/// +=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+
/// |                  profile-specific extensions                  |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
public struct RTCPSenderReport: RTCPPacketBody {
    public static let packetType = RTCPPacketType.senderReport
    public static let element = WireElement.rtcpSenderReport

    public var ssrc: UInt32
    public var ntpTimestamp: NTPTimestamp
    public var rtpTimestamp: UInt32
    public var packetCount: UInt32
    public var octetCount: UInt32
    /// At most 31.
    public var reportBlocks: [RTCPReportBlock]
    /// Profile-specific extension bytes, a whole number of 32-bit words.
    public var profileExtensions: [UInt8]

    public init(
        ssrc: UInt32,
        ntpTimestamp: NTPTimestamp,
        rtpTimestamp: UInt32,
        packetCount: UInt32,
        octetCount: UInt32,
        reportBlocks: [RTCPReportBlock] = [],
        profileExtensions: [UInt8] = []
    ) {
        self.ssrc = ssrc
        self.ntpTimestamp = ntpTimestamp
        self.rtpTimestamp = rtpTimestamp
        self.packetCount = packetCount
        self.octetCount = octetCount
        self.reportBlocks = reportBlocks
        self.profileExtensions = profileExtensions
    }

    public var countField: UInt8 {
        get throws(WireError) {
            guard reportBlocks.count <= 31 else { throw .malformed(Self.element, reason: "more than 31 report blocks") }
            return UInt8(reportBlocks.count)
        }
    }

    public var bodySize: Int { 24 + RTCPReportBlock.size * reportBlocks.count + profileExtensions.count }

    public init(_ body: RTCPBody) throws(WireError) {
        var reader = ByteReader(body.bytes, element: Self.element)
        ssrc = try reader.readUInt32()
        ntpTimestamp = NTPTimestamp(rawValue: try reader.readUInt64())
        rtpTimestamp = try reader.readUInt32()
        packetCount = try reader.readUInt32()
        octetCount = try reader.readUInt32()
        reader.element = .rtcpReportBlock
        reportBlocks = try reader.readReportBlocks(count: body.count)
        profileExtensions = Array(try reader.readBytes(reader.remaining))
    }

    public func writeBody(to writer: inout ByteWriter) throws(WireError) {
        guard profileExtensions.count % 4 == 0 else {
            throw .malformed(Self.element, reason: "profile extensions must be whole 32-bit words")
        }
        try writer.write(ssrc)
        try writer.write(ntpTimestamp.rawValue)
        try writer.write(rtpTimestamp)
        try writer.write(packetCount)
        try writer.write(octetCount)
        for block in reportBlocks { try block.write(to: &writer) }
        try writer.write(contentsOf: profileExtensions)
    }
}
