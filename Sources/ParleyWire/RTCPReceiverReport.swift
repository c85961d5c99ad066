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

/// Writes receiver reports straight into a caller's buffer, one block at a time, allocating
/// nothing: the relay sends them from its forwarding path. Blocks beyond 31 start another
/// receiver report in the same compound packet; with no block at all, it writes an empty
/// report (which a relay sends to keep a trunk alive). The bytes are those of
/// ``RTCPCompoundPacket/serialized(_:)`` for the same reports.
public struct RTCPReceiverReportWriter {
    private var writer: ByteWriter
    private let ssrc: UInt32
    /// Where the report being written starts, and how many blocks it holds.
    private var reportStart: Int?
    private var blocksInReport = 0

    public init(ssrc: UInt32, into buffer: UnsafeMutableRawBufferPointer) {
        writer = ByteWriter(buffer)
        self.ssrc = ssrc
    }

    /// The bytes a compound packet of `blocks` blocks takes.
    public static func size(blocks: Int) -> Int {
        let reports = max(1, (blocks + 30) / 31)
        return reports * 8 + blocks * RTCPReportBlock.size
    }

    public mutating func append(_ block: RTCPReportBlock) throws(WireError) {
        if reportStart == nil || blocksInReport == 31 { try startReport() }
        try block.write(to: &writer)
        blocksInReport += 1
    }

    /// Completes the compound packet; returns its size.
    public mutating func finish() throws(WireError) -> Int {
        if reportStart == nil { try startReport() }
        closeReport()
        return writer.offset
    }

    private mutating func startReport() throws(WireError) {
        closeReport()
        reportStart = writer.offset
        blocksInReport = 0
        try writer.write(UInt32(0))  // the header, filled in when the report is complete
        try writer.write(ssrc)
    }

    private mutating func closeReport() {
        guard let start = reportStart else { return }
        let words = (writer.offset - start) / 4 - 1
        writer.buffer[start] = RTPHeader.version << 6 | UInt8(blocksInReport)
        writer.buffer[start + 1] = RTCPPacketType.receiverReport
        writer.buffer.storeBytes(of: UInt16(words).bigEndian, toByteOffset: start + 2, as: UInt16.self)
        reportStart = nil
    }
}
