/// A generic negative acknowledgement (RFC 4585 §6.2.1): transport feedback (PT 205), FMT 1.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |V=2|P|  FMT=1  |    PT=205     |          length               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                  SSRC of packet sender                        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                  SSRC of media source                         |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |            PID                |             BLP               |  (one or more)
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// PID is a lost packet's sequence number; bit i of BLP (least significant first)
/// says that PID + i + 1 is lost too.
public struct RTCPGenericNACK: RTCPPacketBody {
    public static let packetType = RTCPPacketType.transportFeedback
    public static let element = WireElement.rtcpFeedback
    public static let format: UInt8 = 1

    public struct Entry: Sendable, Hashable {
        public var packetID: UInt16
        public var lostBitmask: UInt16

        public init(packetID: UInt16, lostBitmask: UInt16) {
            self.packetID = packetID
            self.lostBitmask = lostBitmask
        }
    }

    public var senderSSRC: UInt32
    public var mediaSSRC: UInt32
    public var entries: [Entry]

    public init(senderSSRC: UInt32, mediaSSRC: UInt32, entries: [Entry]) {
        self.senderSSRC = senderSSRC
        self.mediaSSRC = mediaSSRC
        self.entries = entries
    }

    /// Packs lost sequence numbers into as few PID/BLP entries as their order allows.
    public init(senderSSRC: UInt32, mediaSSRC: UInt32, lost: [UInt16]) {
        var entries: [Entry] = []
        for sequence in lost {
            if let last = entries.last {
                let distance = sequence &- last.packetID
                if (1...16).contains(distance) {
                    entries[entries.count - 1].lostBitmask |= 1 << (distance - 1)
                    continue
                }
                if distance == 0 { continue }
            }
            entries.append(Entry(packetID: sequence, lostBitmask: 0))
        }
        self.init(senderSSRC: senderSSRC, mediaSSRC: mediaSSRC, entries: entries)
    }

    /// Every sequence number the entries name, in order.
    public var lostSequenceNumbers: [UInt16] {
        entries.flatMap { entry -> [UInt16] in
            [entry.packetID] + (0..<16).compactMap { bit in
                entry.lostBitmask & (1 << bit) != 0 ? entry.packetID &+ UInt16(bit) &+ 1 : nil
            }
        }
    }

    public var countField: UInt8 { Self.format }

    public var bodySize: Int { 8 + 4 * entries.count }

    public init(_ body: RTCPBody) throws(WireError) {
        guard body.count == Self.format else {
            throw .malformed(Self.element, reason: "transport feedback is not a generic NACK")
        }
        var reader = ByteReader(body.bytes, element: Self.element)
        senderSSRC = try reader.readUInt32()
        mediaSSRC = try reader.readUInt32()
        guard reader.remaining >= 4 else {
            throw .malformed(Self.element, reason: "generic NACK has no entries")
        }
        var entries: [Entry] = []
        while reader.remaining >= 4 {
            entries.append(Entry(packetID: try reader.readUInt16(), lostBitmask: try reader.readUInt16()))
        }
        self.entries = entries
    }

    public func writeBody(to writer: inout ByteWriter) throws(WireError) {
        guard !entries.isEmpty else { throw .malformed(Self.element, reason: "generic NACK has no entries") }
        try writer.write(senderSSRC)
        try writer.write(mediaSSRC)
        for entry in entries {
            try writer.write(entry.packetID)
            try writer.write(entry.lostBitmask)
        }
    }
}
