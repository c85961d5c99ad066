/// The header of a DTLS 1.2 record (RFC 6347 §4.1), read so the relay can tell what a
/// datagram in DTLS's first-byte range (RFC 7983: 20–63) is before handing it to OpenSSL,
/// which does everything else.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | content type  |    version (major, minor)     |     epoch     ~
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ~ epoch (cont.) |         sequence number (48 bits)             ~
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ~               |            length             |  fragment...
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// A datagram may carry several records back to back; ``records(in:)`` walks them. A
/// handshake record's fragment starts with the handshake header (RFC 6347 §4.2.2): type
/// (1 byte), length (3), message sequence (2), fragment offset (3), fragment length (3).
public struct DTLSRecordHeader: Sendable, Hashable {
    public enum ContentType: UInt8, Sendable {
        case changeCipherSpec = 20, alert = 21, handshake = 22, applicationData = 23
    }

    public static let size = 13
    public static let handshakeHeaderSize = 12
    public static let clientHello: UInt8 = 1

    public var contentType: ContentType
    /// DTLS 1.0 is 0xFEFF, 1.2 is 0xFEFD (one's complement of 1.1 and 1.3).
    public var version: UInt16
    public var epoch: UInt16
    /// 48 bits.
    public var sequenceNumber: UInt64
    public var length: UInt16

    /// Reads the record header at the start of `bytes`; its fragment must be there whole.
    public init(parsing bytes: UnsafeRawBufferPointer) throws(WireError) {
        var reader = ByteReader(bytes, element: .dtlsRecord)
        guard let type = ContentType(rawValue: try reader.readUInt8()) else {
            throw .malformed(.dtlsRecord, reason: "unknown content type")
        }
        contentType = type
        version = try reader.readUInt16()
        guard version >> 8 == 0xFE else { throw .malformed(.dtlsRecord, reason: "not a DTLS version") }
        epoch = try reader.readUInt16()
        sequenceNumber = UInt64(try reader.readUInt16()) << 32 | UInt64(try reader.readUInt32())
        length = try reader.readUInt16()
        try reader.skip(Int(length))
    }

    /// Whether the datagram's records are all well formed and the first is a ClientHello in
    /// epoch 0: the only datagram that may start a DTLS association.
    public static func startsHandshake(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let first = try? DTLSRecordHeader(parsing: bytes), first.contentType == .handshake, first.epoch == 0,
              first.length >= handshakeHeaderSize, bytes[size] == clientHello else { return false }
        return records(in: bytes) != nil
    }

    /// The number of records in a datagram, or nil when they do not tile it exactly.
    public static func records(in bytes: UnsafeRawBufferPointer) -> Int? {
        var offset = 0
        var count = 0
        while offset < bytes.count {
            guard let header = try? DTLSRecordHeader(parsing: UnsafeRawBufferPointer(rebasing: bytes[offset...])) else { return nil }
            offset += size + Int(header.length)
            count += 1
        }
        return count > 0 ? count : nil
    }
}
