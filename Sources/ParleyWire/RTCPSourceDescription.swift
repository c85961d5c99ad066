/// Source description, RTCP packet type 202 (RFC 3550 §6.5).
///
/// ```
///         0                   1                   2                   3
///         0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
///        +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// header |V=2|P|    SC   |  PT=SDES=202  |             length            |
///        +=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+
/// chunk  |                          SSRC/CSRC_1                          |
///   1    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
///        |                           SDES items                          |
///        |                              ...                              |
///        +=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+
/// ```
///
/// Each item is a type byte, a length byte and that many bytes of UTF-8 text
/// (CNAME is type 1, §6.5.1). A chunk's item list ends with one or more zero
/// bytes, up to the next 32-bit boundary.
public struct RTCPSourceDescription: RTCPPacketBody {
    public static let packetType = RTCPPacketType.sourceDescription
    public static let element = WireElement.rtcpSourceDescription

    public struct Item: Sendable, Hashable {
        public var type: UInt8
        /// The item's text, as bytes (RFC 3550 asks for UTF-8 but receivers must not trust it).
        public var value: [UInt8]

        public static let cnameType: UInt8 = 1
        public static let nameType: UInt8 = 2

        public init(type: UInt8, value: [UInt8]) {
            self.type = type
            self.value = value
        }

        public static func cname(_ text: String) -> Item { Item(type: cnameType, value: Array(text.utf8)) }
    }

    public struct Chunk: Sendable, Hashable {
        public var source: UInt32
        public var items: [Item]

        public init(source: UInt32, items: [Item]) {
            self.source = source
            self.items = items
        }

        /// SSRC, items, at least one terminating zero byte, padded to 32 bits.
        var size: Int { (4 + items.reduce(0) { $0 + 2 + $1.value.count } + 1 + 3) / 4 * 4 }

        /// The CNAME item's text, when present and valid UTF-8.
        public var cname: String? {
            guard let item = items.first(where: { $0.type == Item.cnameType }) else { return nil }
            return String(validating: item.value, as: UTF8.self)
        }
    }

    /// At most 31.
    public var chunks: [Chunk]

    public init(chunks: [Chunk]) { self.chunks = chunks }

    public var countField: UInt8 {
        get throws(WireError) {
            guard chunks.count <= 31 else { throw .malformed(Self.element, reason: "more than 31 chunks") }
            return UInt8(chunks.count)
        }
    }

    public var bodySize: Int { chunks.reduce(0) { $0 + $1.size } }

    public init(_ body: RTCPBody) throws(WireError) {
        var reader = ByteReader(body.bytes, element: Self.element)
        var chunks: [Chunk] = []
        for _ in 0..<body.count {
            let chunkStart = reader.offset
            let source = try reader.readUInt32()
            var items: [Item] = []
            while true {
                let type = try reader.readUInt8()
                if type == 0 { break }
                let length = Int(try reader.readUInt8())
                items.append(Item(type: type, value: Array(try reader.readBytes(length))))
            }
            // Skip the rest of the terminator up to the chunk's 32-bit boundary.
            let used = reader.offset - chunkStart
            try reader.skip((4 - used % 4) % 4)
            chunks.append(Chunk(source: source, items: items))
        }
        self.chunks = chunks
    }

    public func writeBody(to writer: inout ByteWriter) throws(WireError) {
        for chunk in chunks {
            let start = writer.offset
            try writer.write(chunk.source)
            for item in chunk.items {
                guard item.type != 0 else { throw .malformed(Self.element, reason: "item type 0 is the terminator") }
                guard item.value.count <= 255 else { throw .malformed(Self.element, reason: "item longer than 255 bytes") }
                try writer.write(item.type)
                try writer.write(UInt8(item.value.count))
                try writer.write(contentsOf: item.value)
            }
            try writer.writeZeros(chunk.size - (writer.offset - start))
        }
    }
}
