/// A receiver report, RTCP packet type 201 (RFC 3550 §6.4.2).
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |V=2|P|    RC   |   PT=RR=201   |             length            |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                     SSRC of packet sender                     |
/// +=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+
/// |                 report blocks (RC × 24 bytes)                 |
/// +=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+
/// |                  profile-specific extensions                  |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
public struct RTCPReceiverReport: RTCPPacketBody {
    public static let packetType = RTCPPacketType.receiverReport
    public static let element = WireElement.rtcpReceiverReport

    public var ssrc: UInt32
    /// At most 31.
    public var reportBlocks: [RTCPReportBlock]
    /// Profile-specific extension bytes, a whole number of 32-bit words.
    public var profileExtensions: [UInt8]

    public init(ssrc: UInt32, reportBlocks: [RTCPReportBlock] = [], profileExtensions: [UInt8] = []) {
        self.ssrc = ssrc
        self.reportBlocks = reportBlocks
        self.profileExtensions = profileExtensions
    }

    public var countField: UInt8 {
        get throws(WireError) {
            guard reportBlocks.count <= 31 else { throw .malformed(Self.element, reason: "more than 31 report blocks") }
            return UInt8(reportBlocks.count)
        }
    }

    public var bodySize: Int { 4 + RTCPReportBlock.size * reportBlocks.count + profileExtensions.count }

    public init(_ body: RTCPBody) throws(WireError) {
        var reader = ByteReader(body.bytes, element: Self.element)
        ssrc = try reader.readUInt32()
        reader.element = .rtcpReportBlock
        reportBlocks = try reader.readReportBlocks(count: body.count)
        profileExtensions = Array(try reader.readBytes(reader.remaining))
    }

    public func writeBody(to writer: inout ByteWriter) throws(WireError) {
        guard profileExtensions.count % 4 == 0 else {
            throw .malformed(Self.element, reason: "profile extensions must be whole 32-bit words")
        }
        try writer.write(ssrc)
        for block in reportBlocks { try block.write(to: &writer) }
        try writer.write(contentsOf: profileExtensions)
    }
}
