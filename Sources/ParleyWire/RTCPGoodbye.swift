/// Goodbye, RTCP packet type 203 (RFC 3550 §6.6).
///
/// ```
///        0                   1                   2                   3
///        0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
///       +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
///       |V=2|P|    SC   |   PT=BYE=203  |             length            |
///       +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
///       |                           SSRC/CSRC                           |
///       +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
///       :                              ...                              :
///       +=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+
/// (opt) |     length    |               reason for leaving            ...
///       +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
public struct RTCPGoodbye: RTCPPacketBody {
    public static let packetType = RTCPPacketType.goodbye
    public static let element = WireElement.rtcpGoodbye

    /// At most 31.
    public var sources: [UInt32]
    /// The optional reason, as bytes (UTF-8 text by RFC 3550, not trusted here).
    public var reason: [UInt8]?

    public init(sources: [UInt32], reason: String? = nil) {
        self.sources = sources
        self.reason = reason.map { Array($0.utf8) }
    }

    public var reasonText: String? { reason.flatMap { String(validating: $0, as: UTF8.self) } }

    public var countField: UInt8 {
        get throws(WireError) {
            guard sources.count <= 31 else { throw .malformed(Self.element, reason: "more than 31 sources") }
            return UInt8(sources.count)
        }
    }

    public var bodySize: Int {
        4 * sources.count + (reason.map { ($0.count + 1 + 3) / 4 * 4 } ?? 0)
    }

    public init(_ body: RTCPBody) throws(WireError) {
        var reader = ByteReader(body.bytes, element: Self.element)
        var sources: [UInt32] = []
        for _ in 0..<body.count { sources.append(try reader.readUInt32()) }
        self.sources = sources
        if reader.remaining > 0 {
            let length = Int(try reader.readUInt8())
            reason = Array(try reader.readBytes(length))
        } else {
            reason = nil
        }
    }

    public func writeBody(to writer: inout ByteWriter) throws(WireError) {
        for source in sources { try writer.write(source) }
        if let reason {
            guard reason.count <= 255 else { throw .malformed(Self.element, reason: "reason longer than 255 bytes") }
            try writer.write(UInt8(reason.count))
            try writer.write(contentsOf: reason)
            try writer.writeZeros((4 - (reason.count + 1) % 4) % 4)
        }
    }
}
