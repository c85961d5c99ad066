/// A STUN message (RFC 8489 §5), as a browser's ICE agent sends it to check a path and keep
/// its consent (RFC 8445 §7.2, RFC 7675): read in place from the caller's bytes.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |0 0|     STUN Message Type     |         Message Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                         Magic Cookie                          |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// |                     Transaction ID (96 bits)                  |
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |         Type                  |            Length             |   an attribute,
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+   padded to 4 bytes,
/// |                         Value (variable)                ....      any number of them
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// The message type interleaves a 12-bit method with a 2-bit class
/// (`M11..M7 C1 M6..M4 C0 M3..M0`). Over UDP a message fills its datagram exactly, so the
/// length must be the datagram's size less the header, a multiple of 4.
///
/// Only the attributes ICE uses are kept (USERNAME, MESSAGE-INTEGRITY, FINGERPRINT,
/// XOR-MAPPED-ADDRESS, PRIORITY, USE-CANDIDATE, ICE-CONTROLLING, ICE-CONTROLLED, ERROR-CODE);
/// of each, the first occurrence counts (RFC 8489 §14). Attributes after MESSAGE-INTEGRITY
/// other than FINGERPRINT are ignored, as the RFC says, and nothing may follow FINGERPRINT.
/// Checking MESSAGE-INTEGRITY needs an HMAC, which the caller brings
/// (``withIntegrityInput(_:)`` gives it the bytes to sign): this module has no crypto.
public struct STUNMessageView {
    public static let headerSize = 20
    public static let magicCookie: UInt32 = 0x2112_A442
    /// The bytes of MESSAGE-INTEGRITY's HMAC-SHA1 (RFC 8489 §14.5).
    public static let integritySize = 20
    /// XOR'd into FINGERPRINT's CRC-32, so a STUN message cannot pass for another protocol's.
    public static let fingerprintXOR: UInt32 = 0x5354_554E

    public let bytes: UnsafeRawBufferPointer
    public let type: STUNMessageType
    public let transactionID: STUNTransactionID

    /// USERNAME: for ICE, "receiver's ufrag:sender's ufrag" (RFC 8445 §7.2.2).
    public private(set) var username: UnsafeRawBufferPointer?
    public private(set) var priority: UInt32?
    public private(set) var useCandidate = false
    /// ICE-CONTROLLING's or ICE-CONTROLLED's tie-breaker, and which of the two came.
    public private(set) var iceRole: (isControlling: Bool, tieBreaker: UInt64)?
    public private(set) var xorMappedAddress: STUNAddress?
    public private(set) var errorCode: UInt16?
    /// Where MESSAGE-INTEGRITY starts, and its 20 bytes.
    public private(set) var integrity: (offset: Int, value: UnsafeRawBufferPointer)?
    /// Where FINGERPRINT starts, and its value.
    public private(set) var fingerprint: (offset: Int, value: UInt32)?
    /// The first attribute of the comprehension-required range (below 0x8000) this parser
    /// does not know: a request with one is refused by RFC 8489 §6.3.1, and ICE-lite drops it.
    public private(set) var unknownRequiredAttribute: UInt16?

    /// Reads a whole datagram as a STUN message.
    public init(parsing bytes: UnsafeRawBufferPointer) throws(WireError) {
        var reader = ByteReader(bytes, element: .stunMessage)
        let rawType = try reader.readUInt16()
        guard rawType & 0xC000 == 0 else { throw .malformed(.stunMessage, reason: "first two bits are not zero") }
        let length = Int(try reader.readUInt16())
        guard try reader.readUInt32() == Self.magicCookie else { throw .malformed(.stunMessage, reason: "no magic cookie") }
        let id = try reader.readBytes(12)
        guard length % 4 == 0 else { throw .malformed(.stunMessage, reason: "length is not a multiple of 4") }
        guard length == bytes.count - Self.headerSize else {
            throw .malformed(.stunMessage, reason: "length does not match the datagram")
        }
        self.bytes = bytes
        type = STUNMessageType(rawValue: rawType)
        transactionID = STUNTransactionID(id)

        while !reader.isAtEnd {
            let start = reader.offset
            let attributeType = try reader.readUInt16()
            let attributeLength = Int(try reader.readUInt16())
            let value = try reader.readBytes(attributeLength)
            try reader.skip((4 - attributeLength % 4) % 4)
            if fingerprint != nil { throw .malformed(.stunMessage, reason: "an attribute follows FINGERPRINT") }
            if integrity != nil && attributeType != STUNAttribute.fingerprint { continue }
            try read(attributeType, value: value, at: start)
        }
    }

    private mutating func read(_ attribute: UInt16, value: UnsafeRawBufferPointer, at offset: Int) throws(WireError) {
        var reader = ByteReader(value, element: .stunMessage)
        switch attribute {
        case STUNAttribute.username:
            guard username == nil else { return }
            guard value.count <= STUNAttribute.maximumUsernameSize else { throw .malformed(.stunMessage, reason: "USERNAME longer than 513 bytes") }
            username = value
        case STUNAttribute.messageIntegrity:
            guard value.count == Self.integritySize else { throw .malformed(.stunMessage, reason: "MESSAGE-INTEGRITY is not 20 bytes") }
            integrity = (offset, value)
        case STUNAttribute.fingerprint:
            guard value.count == 4 else { throw .malformed(.stunMessage, reason: "FINGERPRINT is not 4 bytes") }
            fingerprint = (offset, try reader.readUInt32())
        case STUNAttribute.priority:
            guard priority == nil else { return }
            guard value.count == 4 else { throw .malformed(.stunMessage, reason: "PRIORITY is not 4 bytes") }
            priority = try reader.readUInt32()
        case STUNAttribute.useCandidate:
            guard value.isEmpty else { throw .malformed(.stunMessage, reason: "USE-CANDIDATE carries a value") }
            useCandidate = true
        case STUNAttribute.iceControlling, STUNAttribute.iceControlled:
            guard iceRole == nil else { return }
            guard value.count == 8 else { throw .malformed(.stunMessage, reason: "ICE role attribute is not 8 bytes") }
            iceRole = (attribute == STUNAttribute.iceControlling, try reader.readUInt64())
        case STUNAttribute.xorMappedAddress:
            guard xorMappedAddress == nil else { return }
            xorMappedAddress = try STUNAddress(xored: &reader, transactionID: transactionID)
        case STUNAttribute.errorCode:
            guard errorCode == nil else { return }
            try reader.skip(2)
            let classDigit = try reader.readUInt8() & 0x07
            let number = try reader.readUInt8()
            guard (3...6).contains(classDigit), number < 100 else { throw .malformed(.stunMessage, reason: "ERROR-CODE out of range") }
            errorCode = UInt16(classDigit) * 100 + UInt16(number)
        default:
            if attribute < 0x8000 && unknownRequiredAttribute == nil { unknownRequiredAttribute = attribute }
        }
    }

    /// Whether FINGERPRINT is there and matches the CRC-32 of everything before it.
    public var hasValidFingerprint: Bool {
        guard let fingerprint else { return false }
        var crc = CRC32()
        var header = Self.header(of: bytes, lengthThrough: fingerprint.offset + 8)
        withUnsafeBytes(of: &header) { crc.update($0) }
        crc.update(UnsafeRawBufferPointer(rebasing: bytes[Self.headerSize..<fingerprint.offset]))
        return crc.value ^ Self.fingerprintXOR == fingerprint.value
    }

    /// Hands `body` the two pieces MESSAGE-INTEGRITY signs: the header with its length as if
    /// the message ended with MESSAGE-INTEGRITY, and the attributes before it. Nil when the
    /// message has no MESSAGE-INTEGRITY.
    public func withIntegrityInput<Result>(
        _ body: (_ header: UnsafeRawBufferPointer, _ attributes: UnsafeRawBufferPointer) throws -> Result
    ) rethrows -> Result? {
        guard let integrity else { return nil }
        var header = Self.header(of: bytes, lengthThrough: integrity.offset + 4 + Self.integritySize)
        let attributes = UnsafeRawBufferPointer(rebasing: bytes[Self.headerSize..<integrity.offset])
        return try withUnsafeBytes(of: &header) { try body($0, attributes) }
    }

    /// The 20-byte header of `bytes` with the length field saying the message ends at `end`.
    static func header(of bytes: UnsafeRawBufferPointer, lengthThrough end: Int) -> STUNHeaderBytes {
        var header = STUNHeaderBytes()
        withUnsafeMutableBytes(of: &header) { raw in
            raw.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[0..<Self.headerSize]))
            raw.storeBytes(of: UInt16(truncatingIfNeeded: end - Self.headerSize).bigEndian, toByteOffset: 2, as: UInt16.self)
        }
        return header
    }

    /// Whether the first byte of a datagram puts it in STUN's range (RFC 7983: 0–3).
    public static func isSTUN(firstByte: UInt8) -> Bool { firstByte <= 3 }
}

/// Twenty bytes on the stack, for a header rewritten before it is signed.
struct STUNHeaderBytes {
    var words: (UInt64, UInt64, UInt32) = (0, 0, 0)
}

/// A STUN message type: its method and class (RFC 8489 §5).
public struct STUNMessageType: Sendable, Hashable {
    public enum MessageClass: UInt16, Sendable { case request = 0, indication = 1, successResponse = 2, errorResponse = 3 }

    public let method: UInt16
    public let messageClass: MessageClass

    public static let bindingMethod: UInt16 = 0x001
    public static let bindingRequest = STUNMessageType(method: bindingMethod, messageClass: .request)
    public static let bindingSuccess = STUNMessageType(method: bindingMethod, messageClass: .successResponse)
    public static let bindingError = STUNMessageType(method: bindingMethod, messageClass: .errorResponse)
    public static let bindingIndication = STUNMessageType(method: bindingMethod, messageClass: .indication)

    public init(method: UInt16, messageClass: MessageClass) {
        self.method = method & 0x0FFF
        self.messageClass = messageClass
    }

    public init(rawValue: UInt16) {
        method = (rawValue & 0x000F) | (rawValue & 0x00E0) >> 1 | (rawValue & 0x3E00) >> 2
        messageClass = MessageClass(rawValue: (rawValue >> 7) & 0x2 | (rawValue >> 4) & 0x1)!
    }

    public var rawValue: UInt16 {
        let c = messageClass.rawValue
        return (method & 0x000F) | (method & 0x0070) << 1 | (method & 0x0F80) << 2 | (c & 0x1) << 4 | (c & 0x2) << 7
    }
}

/// The 96-bit transaction ID that pairs a response with its request.
public struct STUNTransactionID: Sendable, Hashable {
    public var high: UInt32
    public var middle: UInt32
    public var low: UInt32

    public init(high: UInt32, middle: UInt32, low: UInt32) {
        self.high = high
        self.middle = middle
        self.low = low
    }

    init(_ bytes: UnsafeRawBufferPointer) {
        high = UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt32.self))
        middle = UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
        low = UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
    }

    public static func random<Generator: RandomNumberGenerator>(using generator: inout Generator) -> STUNTransactionID {
        STUNTransactionID(high: .random(in: 0 ... .max, using: &generator), middle: .random(in: 0 ... .max, using: &generator),
                          low: .random(in: 0 ... .max, using: &generator))
    }
}

/// Attribute types ICE uses (RFC 8489 §18.3, RFC 8445 §16.1).
public enum STUNAttribute {
    public static let username: UInt16 = 0x0006
    public static let messageIntegrity: UInt16 = 0x0008
    public static let errorCode: UInt16 = 0x0009
    public static let xorMappedAddress: UInt16 = 0x0020
    public static let priority: UInt16 = 0x0024
    public static let useCandidate: UInt16 = 0x0025
    public static let software: UInt16 = 0x8022
    public static let fingerprint: UInt16 = 0x8028
    public static let iceControlled: UInt16 = 0x8029
    public static let iceControlling: UInt16 = 0x802A

    /// RFC 8489 §14.3: fewer than 509 bytes; 513 is the limit a receiver enforces.
    public static let maximumUsernameSize = 513
}

/// A transport address in a STUN attribute.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |0 0 0 0 0 0 0 0|    Family     |         X-Port                |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                X-Address (Variable)
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// XOR-MAPPED-ADDRESS XORs the port with the cookie's top 16 bits and the address with the
/// cookie (IPv4) or the cookie and the transaction ID (IPv6), so that NATs that rewrite
/// addresses they see in payloads leave it alone (RFC 8489 §14.2).
public enum STUNAddress: Sendable, Hashable {
    /// The address in host order, as `192.0.2.1` = `0xC000_0201`.
    case ipv4(UInt32, port: UInt16)
    /// The 16 bytes as two big-endian halves.
    case ipv6(high: UInt64, low: UInt64, port: UInt16)

    init(xored reader: inout ByteReader, transactionID: STUNTransactionID) throws(WireError) {
        try reader.skip(1)
        let family = try reader.readUInt8()
        let port = try reader.readUInt16() ^ UInt16(STUNMessageView.magicCookie >> 16)
        switch family {
        case 0x01:
            guard reader.remaining == 4 else { throw .malformed(.stunMessage, reason: "IPv4 address is not 4 bytes") }
            self = .ipv4(try reader.readUInt32() ^ STUNMessageView.magicCookie, port: port)
        case 0x02:
            guard reader.remaining == 16 else { throw .malformed(.stunMessage, reason: "IPv6 address is not 16 bytes") }
            let (maskHigh, maskLow) = Self.ipv6Mask(transactionID)
            self = .ipv6(high: try reader.readUInt64() ^ maskHigh, low: try reader.readUInt64() ^ maskLow, port: port)
        default:
            throw .malformed(.stunMessage, reason: "unknown address family")
        }
    }

    static func ipv6Mask(_ id: STUNTransactionID) -> (UInt64, UInt64) {
        (UInt64(STUNMessageView.magicCookie) << 32 | UInt64(id.high), UInt64(id.middle) << 32 | UInt64(id.low))
    }

    public var port: UInt16 {
        switch self {
        case let .ipv4(_, port), let .ipv6(_, _, port): return port
        }
    }

    /// The attribute's value size (family, port and address).
    var valueSize: Int {
        switch self {
        case .ipv4: return 8
        case .ipv6: return 20
        }
    }
}
