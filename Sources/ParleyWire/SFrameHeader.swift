/// The header of an SFrame ciphertext (RFC 9605 §4.3): which key sealed the frame (KID) and
/// the frame's counter under that key (CTR), each in as few bytes as its value needs.
///
/// ```
///  0 1 2 3 4 5 6 7
/// +-+-+-+-+-+-+-+-+---------------------------+---------------------------+
/// |X|  K  |Y|  C  |   KID... (if X = 1)       |   CTR... (if Y = 1)       |
/// +-+-+-+-+-+-+-+-+---------------------------+---------------------------+
/// ```
///
/// `X = 0`: `K` is the KID itself (0–7). `X = 1`: `K + 1` bytes of KID follow, big-endian.
/// `Y` and `C` say the same of the counter, whose bytes follow the KID's. The header is
/// authenticated with the frame (it is the start of the AEAD's associated data), so a
/// changed KID or counter fails to open.
///
/// Parley sends every Opus frame of an end-to-end encrypted room as `header | ciphertext |
/// tag`, the whole of which is what RTP (or a RED block) carries.
public struct SFrameHeader: Sendable, Hashable {
    /// Names the sender's key and its generation (see `MediaKeyID` in ParleyE2EE).
    public var keyID: UInt64
    /// Unique per frame under one key: the nonce is the key's salt XOR this counter.
    public var counter: UInt64

    /// The longest header: the config byte, eight bytes of KID and eight of counter.
    public static let maximumSize = 17

    public init(keyID: UInt64, counter: UInt64) {
        self.keyID = keyID
        self.counter = counter
    }

    /// Bytes the header takes.
    public var serializedSize: Int { 1 + Self.extraBytes(keyID) + Self.extraBytes(counter) }

    /// Reads the header at the start of `bytes` (its ``serializedSize`` is where the
    /// ciphertext begins).
    public init(parsing bytes: UnsafeRawBufferPointer) throws(WireError) {
        var reader = ByteReader(bytes, element: .sframeHeader)
        let config = try reader.readUInt8()
        keyID = try Self.readValue(flagged: config & 0x80 != 0, field: (config >> 4) & 0x07, from: &reader)
        counter = try Self.readValue(flagged: config & 0x08 != 0, field: config & 0x07, from: &reader)
    }

    /// The size of the header at the start of `bytes`, read from its first byte alone; nil
    /// when `bytes` is empty.
    public static func size(of bytes: UnsafeRawBufferPointer) -> Int? {
        guard let config = bytes.first else { return nil }
        let keyBytes = config & 0x80 != 0 ? Int((config >> 4) & 0x07) + 1 : 0
        let counterBytes = config & 0x08 != 0 ? Int(config & 0x07) + 1 : 0
        return 1 + keyBytes + counterBytes
    }

    /// Writes the header at the writer's position.
    public func write(to writer: inout ByteWriter) throws(WireError) {
        let keyBytes = Self.extraBytes(keyID)
        let counterBytes = Self.extraBytes(counter)
        var config: UInt8 = keyBytes == 0 ? UInt8(keyID) << 4 : 0x80 | UInt8(keyBytes - 1) << 4
        config |= counterBytes == 0 ? UInt8(counter) : 0x08 | UInt8(counterBytes - 1)
        try writer.write(config)
        try Self.writeValue(keyID, bytes: keyBytes, to: &writer)
        try Self.writeValue(counter, bytes: counterBytes, to: &writer)
    }

    /// Bytes a value needs after the config byte: none up to 7, else its big-endian length.
    private static func extraBytes(_ value: UInt64) -> Int {
        guard value > 7 else { return 0 }
        return (64 - value.leadingZeroBitCount + 7) / 8
    }

    private static func readValue(flagged: Bool, field: UInt8, from reader: inout ByteReader) throws(WireError) -> UInt64 {
        guard flagged else { return UInt64(field) }
        var value: UInt64 = 0
        for _ in 0...Int(field) { value = value << 8 | UInt64(try reader.readUInt8()) }
        return value
    }

    private static func writeValue(_ value: UInt64, bytes: Int, to writer: inout ByteWriter) throws(WireError) {
        var shift = bytes * 8
        while shift > 0 {
            shift -= 8
            try writer.write(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
        }
    }
}
