/// What one member tells another, sealed to the other's identity key (HPKE, RFC 9180): its
/// media key, and the room as it sees it, so a member that a relay hides from some of the
/// room cannot stay hidden.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  version = 1  |                 key ID (8 bytes) ...          |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     ...       |  key length   |      base key (16–32) ...     |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     members in the sender's view    |  room view digest (32) ...
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// Read only after the HPKE seal authenticated it as the sender's, but parsed as any bytes
/// from the network are: a bad length is a typed error, never a trap.
public struct MediaKeyPackage: Sendable, Hashable {
    public static let version: UInt8 = 1
    public static let digestSize = 32

    /// The SFrame KID the key seals under (epoch and generation).
    public var keyID: UInt64
    public var baseKey: [UInt8]
    /// How many members the sender saw in the room, itself included.
    public var memberCount: UInt16
    /// SHA-256 of the room as the sender saw it (`RoomView`): names and identity keys.
    public var roomViewDigest: [UInt8]

    public init(keyID: UInt64, baseKey: [UInt8], memberCount: UInt16, roomViewDigest: [UInt8]) {
        self.keyID = keyID
        self.baseKey = baseKey
        self.memberCount = memberCount
        self.roomViewDigest = roomViewDigest
    }

    public var serializedSize: Int { 1 + 8 + 1 + baseKey.count + 2 + Self.digestSize }

    public init(parsing bytes: UnsafeRawBufferPointer) throws(WireError) {
        var reader = ByteReader(bytes, element: .mediaKeyPackage)
        guard try reader.readUInt8() == Self.version else {
            throw .malformed(.mediaKeyPackage, reason: "unsupported media key package version")
        }
        keyID = try reader.readUInt64()
        let length = Int(try reader.readUInt8())
        guard (16...32).contains(length) else { throw .malformed(.mediaKeyPackage, reason: "a base key is 16 to 32 bytes") }
        baseKey = Array(try reader.readBytes(length))
        memberCount = try reader.readUInt16()
        roomViewDigest = Array(try reader.readBytes(Self.digestSize))
    }

    public func serialized() throws(WireError) -> [UInt8] {
        guard (16...32).contains(baseKey.count) else { throw .malformed(.mediaKeyPackage, reason: "a base key is 16 to 32 bytes") }
        guard roomViewDigest.count == Self.digestSize else { throw .malformed(.mediaKeyPackage, reason: "a room view digest is 32 bytes") }
        return try [UInt8](serializedSize: serializedSize) { (writer: inout ByteWriter) throws(WireError) in
            try writer.write(Self.version)
            try writer.write(keyID)
            try writer.write(UInt8(baseKey.count))
            try writer.write(contentsOf: baseKey)
            try writer.write(memberCount)
            try writer.write(contentsOf: roomViewDigest)
        }
    }
}
