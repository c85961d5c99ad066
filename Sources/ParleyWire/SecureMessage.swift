/// The messages of Parley's secure transport: an address check, a Noise NK handshake, and
/// sealed packets. Parsing and layout only; the cryptography is in `ParleySecurity`.
///
/// ```
/// client                                          relay
///   | hello(nonce), padded to 64 bytes  ------------> |  stateless; answered with no more bytes
///   | <------------ cookie(nonce, cookie, key ID)     |  cookie = MAC(address, nonce), 2-minute life
///   | handshakeInit(index, cookie, Noise msg 1) ----> |  msg 1 payload = the join (≥ 512 bytes)
///   | <----- handshakeResponse(index, Noise msg 2)    |  only for a valid init; payload = joined
///   | sealed(...) <---------------------------------> |  every later packet, both ways
/// ```
///
/// First bytes, all in Parley's range of ``PacketKind``:
///
/// | byte | message |
/// | --- | --- |
/// | 0x51 | hello |
/// | 0x52 | cookie |
/// | 0x53 | handshake init |
/// | 0x54 | handshake response |
/// | 0x55 | sealed packet |
/// | 0x56 | trunk handshake init (relay → relay: hello and cookie as above, then Noise IK) |
/// | 0x57 | trunk handshake response |
public enum SecureMessageType: UInt8, Sendable, Hashable {
    case hello = 0x51
    case cookie = 0x52
    case handshakeInit = 0x53
    case handshakeResponse = 0x54
    case sealed = 0x55
    case trunkInit = 0x56
    case trunkResponse = 0x57
}

/// The version byte every secure message carries second.
public let secureTransportVersion: UInt8 = 1

/// Client → relay: asks for an address cookie. Padded so that the cookie reply is smaller.
///
/// ```
/// +------+---------+----------+---------------------------+-------------------+
/// | 0x51 | version | reserved |   nonce (8 bytes)         | zeros to 64 bytes |
/// +------+---------+----------+---------------------------+-------------------+
///    1        1         2                  8
/// ```
public struct HandshakeHello: Sendable, Hashable {
    public static let size = 64
    /// Random; echoed in the cookie reply so the client can match it to its request.
    public var nonce: UInt64

    public init(nonce: UInt64) { self.nonce = nonce }

    /// The nonce as it travels (big-endian): what an unauthenticated reply to this hello echoes.
    public var nonceBytes: [UInt8] { withUnsafeBytes(of: nonce.bigEndian, Array.init) }

    public init(parsing bytes: UnsafeRawBufferPointer) throws(WireError) {
        var reader = try secureHeader(bytes, type: .hello)
        guard bytes.count >= Self.size else {
            throw .malformed(.secureMessage, reason: "hello is shorter than 64 bytes")
        }
        nonce = try reader.readUInt64()
    }

    public func write(to writer: inout ByteWriter) throws(WireError) {
        try writeSecureHeader(&writer, type: .hello)
        try writer.write(nonce)
        try writer.writeZeros(Self.size - 12)
    }
}

/// Relay → client: a cookie bound to the client's address, and which key the relay holds.
///
/// ```
/// +------+---------+----------+-----------+--------------------+------------------+
/// | 0x52 | version | reserved | nonce (8) | cookie (16 bytes)  | relay key ID (8) |
/// +------+---------+----------+-----------+--------------------+------------------+
/// ```
///
/// The key ID (the first 8 bytes of SHA-256 of the relay's public key) lets a client
/// whose invite pins another key say so at once, instead of timing out.
public struct HandshakeCookie: Sendable, Hashable {
    public static let size = 36
    public static let cookieSize = 16
    public static let keyIDSize = 8

    public var nonce: UInt64
    public var cookie: [UInt8]
    public var relayKeyID: [UInt8]

    public init(nonce: UInt64, cookie: [UInt8], relayKeyID: [UInt8]) {
        self.nonce = nonce
        self.cookie = cookie
        self.relayKeyID = relayKeyID
    }

    public init(parsing bytes: UnsafeRawBufferPointer) throws(WireError) {
        var reader = try secureHeader(bytes, type: .cookie)
        nonce = try reader.readUInt64()
        cookie = Array(try reader.readBytes(Self.cookieSize))
        relayKeyID = Array(try reader.readBytes(Self.keyIDSize))
    }

    public func write(to writer: inout ByteWriter) throws(WireError) {
        guard cookie.count == Self.cookieSize, relayKeyID.count == Self.keyIDSize else {
            throw .malformed(.secureMessage, reason: "cookie must be 16 bytes and key ID 8")
        }
        try writeSecureHeader(&writer, type: .cookie)
        try writer.write(nonce)
        try writer.write(contentsOf: cookie)
        try writer.write(contentsOf: relayKeyID)
    }
}

/// Client → relay: the first Noise NK message, carrying the join.
///
/// ```
/// +------+---------+----------+------------------+-------------+--------------------------+
/// | 0x53 | version | reserved | sender index (4) | cookie (16) | Noise message 1 (≥ 48 B) |
/// +------+---------+----------+------------------+-------------+--------------------------+
/// ```
///
/// The first 24 bytes are also the handshake's prologue, so changing any of them makes
/// the handshake fail. `senderIndex` is how the client will recognise the relay's
/// packets to it (the receiver index of sealed packets it receives).
public struct HandshakeInit {
    public static let headerSize = 24
    /// An ephemeral key and an empty payload's tag: the smallest possible Noise message 1.
    public static let minimumNoiseMessageSize = 48

    public let senderIndex: UInt32
    /// The cookie, a slice of the parsed bytes.
    public let cookie: UnsafeRawBufferPointer
    /// The header bytes that are bound into the handshake.
    public let header: UnsafeRawBufferPointer
    public let noiseMessage: UnsafeRawBufferPointer

    /// `type`: a client's init, or a relay's trunk init (``SecureMessageType/trunkInit``), whose
    /// layout is the same.
    public init(parsing bytes: UnsafeRawBufferPointer, type: SecureMessageType = .handshakeInit) throws(WireError) {
        var reader = try secureHeader(bytes, type: type)
        senderIndex = try reader.readUInt32()
        cookie = try reader.readBytes(HandshakeCookie.cookieSize)
        header = UnsafeRawBufferPointer(rebasing: bytes[0..<Self.headerSize])
        guard reader.remaining >= Self.minimumNoiseMessageSize else {
            throw .truncated(.secureMessage, needed: Self.headerSize + Self.minimumNoiseMessageSize, available: bytes.count)
        }
        noiseMessage = try reader.readBytes(reader.remaining)
    }

    /// Writes the 24-byte header; the caller appends Noise message 1.
    public static func writeHeader(
        to writer: inout ByteWriter, senderIndex: UInt32, cookie: [UInt8], type: SecureMessageType = .handshakeInit
    ) throws(WireError) {
        guard cookie.count == HandshakeCookie.cookieSize else {
            throw .malformed(.secureMessage, reason: "cookie must be 16 bytes")
        }
        try writeSecureHeader(&writer, type: type)
        try writer.write(senderIndex)
        try writer.write(contentsOf: cookie)
    }
}

/// Relay → client: the second Noise NK message, carrying the relay's index and the joined reply.
///
/// ```
/// +------+---------+----------+--------------------+--------------------------+
/// | 0x54 | version | reserved | receiver index (4) | Noise message 2 (≥ 48 B) |
/// +------+---------+----------+--------------------+--------------------------+
/// ```
public struct HandshakeResponse {
    public static let headerSize = 8

    /// The client's sender index from the init this answers.
    public let receiverIndex: UInt32
    public let noiseMessage: UnsafeRawBufferPointer

    /// `type`: the relay's answer to a client, or to a trunk init (``SecureMessageType/trunkResponse``).
    public init(parsing bytes: UnsafeRawBufferPointer, type: SecureMessageType = .handshakeResponse) throws(WireError) {
        var reader = try secureHeader(bytes, type: type)
        receiverIndex = try reader.readUInt32()
        guard reader.remaining >= HandshakeInit.minimumNoiseMessageSize else {
            throw .truncated(.secureMessage, needed: Self.headerSize + HandshakeInit.minimumNoiseMessageSize, available: bytes.count)
        }
        noiseMessage = try reader.readBytes(reader.remaining)
    }

    public static func writeHeader(
        to writer: inout ByteWriter, receiverIndex: UInt32, type: SecureMessageType = .handshakeResponse
    ) throws(WireError) {
        try writeSecureHeader(&writer, type: type)
        try writer.write(receiverIndex)
    }
}

/// The clear header of a sealed packet; everything after it is ciphertext and a 16-byte tag.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     0x55      |   version     |P|  reserved (0)               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                        receiver index                         |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                      counter (64 bits)                        |
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |          ciphertext of the inner packet (RTP, RTCP, control) ...
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                      tag (16 bytes)                           |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// The whole header is authenticated data. `P` is the key phase, flipped at each rekey.
/// The counter is the AEAD nonce and the replay-window position; it never repeats.
public struct SealedHeader: Sendable, Hashable {
    public static let size = 16
    public static let tagSize = 16
    /// Bytes a sealed packet adds to the packet it carries.
    public static let overhead = size + tagSize

    public var keyPhase: Bool
    public var receiverIndex: UInt32
    public var counter: UInt64

    public init(keyPhase: Bool, receiverIndex: UInt32, counter: UInt64) {
        self.keyPhase = keyPhase
        self.receiverIndex = receiverIndex
        self.counter = counter
    }

    public init(parsing bytes: UnsafeRawBufferPointer) throws(WireError) {
        var reader = try secureHeader(bytes, type: .sealed, readsReserved: false)
        let flags = try reader.readUInt8()
        _ = try reader.readUInt8()
        keyPhase = flags & 0x80 != 0
        receiverIndex = try reader.readUInt32()
        counter = try reader.readUInt64()
        guard reader.remaining >= Self.tagSize else {
            throw .truncated(.secureMessage, needed: Self.overhead, available: bytes.count)
        }
    }

    public func write(to writer: inout ByteWriter) throws(WireError) {
        try writer.write(SecureMessageType.sealed.rawValue)
        try writer.write(secureTransportVersion)
        try writer.write(UInt8(keyPhase ? 0x80 : 0))
        try writer.write(UInt8(0))
        try writer.write(receiverIndex)
        try writer.write(counter)
    }
}

private func secureHeader(
    _ bytes: UnsafeRawBufferPointer, type: SecureMessageType, readsReserved: Bool = true
) throws(WireError) -> ByteReader {
    var reader = ByteReader(bytes, element: .secureMessage)
    guard try reader.readUInt8() == type.rawValue else {
        throw .malformed(.secureMessage, reason: "unexpected message type")
    }
    guard try reader.readUInt8() == secureTransportVersion else {
        throw .malformed(.secureMessage, reason: "unsupported secure transport version")
    }
    if readsReserved { try reader.skip(2) }
    return reader
}

private func writeSecureHeader(_ writer: inout ByteWriter, type: SecureMessageType) throws(WireError) {
    try writer.write(type.rawValue)
    try writer.write(secureTransportVersion)
    try writer.write(UInt16(0))
}
