/// Relay → relay: what a trunk is for, the payload of the trunk init (encrypted to the peer,
/// sent only after the peer's address cookie).
///
/// ```
/// +-------------+------------------+---------------------------+
/// | version (1) | room length (1)  | room (1–64 bytes, ASCII)  |
/// +-------------+------------------+---------------------------+
/// ```
///
/// One trunk carries one room: the media of two rooms never share a trunk's SSRC space, and a
/// trunk ends with its room. The peer answers inside the trunk response with a
/// ``ControlMessage`` (`ack` when it accepted, `error` saying why not).
public struct TrunkOpening: Sendable, Hashable {
    public static let version: UInt8 = 1
    public var room: String

    public init(room: String) { self.room = room }

    public init(parsing bytes: UnsafeRawBufferPointer) throws(WireError) {
        var reader = ByteReader(bytes, element: .trunkOpening)
        guard try reader.readUInt8() == Self.version else { throw .malformed(.trunkOpening, reason: "unsupported trunk version") }
        room = try reader.readString8()
        guard ParleyNames.problem(withRoom: room) == nil else { throw .malformed(.trunkOpening, reason: "not a valid room name") }
        guard reader.remaining == 0 else { throw .malformed(.trunkOpening, reason: "bytes after the room name") }
    }

    public var serializedSize: Int { 2 + room.utf8.count }

    public func write(to writer: inout ByteWriter) throws(WireError) {
        guard ParleyNames.problem(withRoom: room) == nil else { throw .malformed(.trunkOpening, reason: "not a valid room name") }
        try writer.write(Self.version)
        try writer.writeString8(room, element: .trunkOpening)
    }

    public func serialized() throws(WireError) -> [UInt8] {
        try [UInt8](serializedSize: serializedSize) { (writer: inout ByteWriter) throws(WireError) in try write(to: &writer) }
    }
}
