/// One packet of an RTCP compound packet.
public enum RTCPPacket: Sendable, Hashable {
    case senderReport(RTCPSenderReport)
    case receiverReport(RTCPReceiverReport)
    case sourceDescription(RTCPSourceDescription)
    case goodbye(RTCPGoodbye)
    case genericNACK(RTCPGenericNACK)
    /// A packet type Parley does not interpret (APP, other feedback, XR, …), kept whole.
    case other(RTCPOtherPacket)

    public var serializedSize: Int {
        switch self {
        case let .senderReport(packet): return packet.serializedSize
        case let .receiverReport(packet): return packet.serializedSize
        case let .sourceDescription(packet): return packet.serializedSize
        case let .goodbye(packet): return packet.serializedSize
        case let .genericNACK(packet): return packet.serializedSize
        case let .other(packet): return packet.serializedSize
        }
    }

    public func write(to writer: inout ByteWriter) throws(WireError) {
        switch self {
        case let .senderReport(packet): try packet.write(to: &writer)
        case let .receiverReport(packet): try packet.write(to: &writer)
        case let .sourceDescription(packet): try packet.write(to: &writer)
        case let .goodbye(packet): try packet.write(to: &writer)
        case let .genericNACK(packet): try packet.write(to: &writer)
        case let .other(packet): try packet.write(to: &writer)
        }
    }

    init(_ body: RTCPBody) throws(WireError) {
        switch body.packetType {
        case RTCPSenderReport.packetType: self = .senderReport(try RTCPSenderReport(body))
        case RTCPReceiverReport.packetType: self = .receiverReport(try RTCPReceiverReport(body))
        case RTCPSourceDescription.packetType: self = .sourceDescription(try RTCPSourceDescription(body))
        case RTCPGoodbye.packetType: self = .goodbye(try RTCPGoodbye(body))
        case RTCPGenericNACK.packetType where body.count == RTCPGenericNACK.format:
            self = .genericNACK(try RTCPGenericNACK(body))
        default: self = .other(try RTCPOtherPacket(body))
        }
    }
}

/// An RTCP packet of a type Parley does not interpret, kept as its header fields and body.
public struct RTCPOtherPacket: RTCPPacketBody {
    public static let packetType: UInt8 = 0  // unused: the instance's own type is written
    public static let element = WireElement.rtcpHeader

    public var type: UInt8
    public var count: UInt8
    /// The body, a whole number of 32-bit words.
    public var body: [UInt8]

    public init(type: UInt8, count: UInt8, body: [UInt8]) {
        self.type = type
        self.count = count
        self.body = body
    }

    public var countField: UInt8 { count }
    public var bodySize: Int { body.count }

    public init(_ body: RTCPBody) throws(WireError) {
        self.init(type: body.packetType, count: body.count, body: Array(body.bytes))
    }

    public func writeBody(to writer: inout ByteWriter) throws(WireError) {
        try writer.write(contentsOf: body)
    }

    /// Like the shared writer, but with this packet's own type byte.
    public func write(to writer: inout ByteWriter) throws(WireError) {
        guard count <= 31 else { throw .malformed(Self.element, reason: "count field exceeds 31") }
        guard body.count % 4 == 0, body.count / 4 <= Int(UInt16.max) else {
            throw .malformed(Self.element, reason: "body must be whole 32-bit words")
        }
        try writer.write(RTPHeader.version << 6 | count)
        try writer.write(type)
        try writer.write(UInt16(body.count / 4))
        try writeBody(to: &writer)
    }
}

/// An RTCP compound packet (RFC 3550 §6.1): RTCP packets stacked in one datagram.
///
/// Parsing checks each packet's version and length against what remains, and
/// accepts the padding bit only on the last packet (RFC 3550 A.2). It does not
/// insist that the first packet be a report, so reduced-size RTCP (RFC 5506, a
/// lone NACK for example) is read too.
public enum RTCPCompoundPacket {
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws(WireError) -> [RTCPPacket] {
        guard !bytes.isEmpty else { throw .truncated(.rtcpHeader, needed: 4, available: 0) }
        var packets: [RTCPPacket] = []
        var reader = ByteReader(bytes, element: .rtcpHeader)
        while !reader.isAtEnd {
            let first = try reader.readUInt8()
            guard first >> 6 == RTPHeader.version else {
                throw .malformed(.rtcpHeader, reason: "version is not 2")
            }
            let packetType = try reader.readUInt8()
            let length = 4 * Int(try reader.readUInt16())
            var body = try reader.readBytes(length)
            if first & 0x20 != 0 {
                guard reader.isAtEnd else {
                    throw .malformed(.rtcpHeader, reason: "padding bit set on a packet that is not the last")
                }
                let padding = Int(body.last ?? 0)
                guard padding > 0, padding <= body.count else {
                    throw .malformed(.rtcpHeader, reason: "padding count is zero or exceeds the packet")
                }
                body = UnsafeRawBufferPointer(rebasing: body[0..<(body.count - padding)])
            }
            packets.append(try RTCPPacket(RTCPBody(count: first & 0x1F, packetType: packetType, bytes: body)))
        }
        return packets
    }

    public static func parse(_ bytes: [UInt8]) throws(WireError) -> [RTCPPacket] {
        var result: Result<[RTCPPacket], WireError> = .success([])
        bytes.withUnsafeBytes { raw in
            do throws(WireError) { result = .success(try parse(raw)) } catch { result = .failure(error) }
        }
        return try result.get()
    }

    public static func serializedSize(_ packets: [RTCPPacket]) -> Int {
        packets.reduce(0) { $0 + $1.serializedSize }
    }

    /// Writes the packets back to back; returns the number of bytes written.
    @discardableResult
    public static func serialize(_ packets: [RTCPPacket], into buffer: UnsafeMutableRawBufferPointer) throws(WireError) -> Int {
        var writer = ByteWriter(buffer)
        for packet in packets { try packet.write(to: &writer) }
        return writer.offset
    }

    public static func serialized(_ packets: [RTCPPacket]) throws(WireError) -> [UInt8] {
        try [UInt8](serializedSize: serializedSize(packets)) { (writer: inout ByteWriter) throws(WireError) in
            for packet in packets { try packet.write(to: &writer) }
        }
    }
}
