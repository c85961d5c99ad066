/// Writes a STUN message (RFC 8489) into memory the caller owns: the header, then each
/// attribute in the order they are appended, the length kept right after every step, so
/// MESSAGE-INTEGRITY and FINGERPRINT sign exactly what precedes them.
///
/// The HMAC of MESSAGE-INTEGRITY is the caller's (``appendMessageIntegrity(_:)``): this
/// module has no crypto. FINGERPRINT's CRC-32 is computed here.
public struct STUNMessageWriter {
    private var writer: ByteWriter

    /// Starts a message at the start of `buffer`.
    public init(type: STUNMessageType, transactionID: STUNTransactionID, into buffer: UnsafeMutableRawBufferPointer) throws(WireError) {
        writer = ByteWriter(buffer)
        try writer.write(type.rawValue)
        try writer.write(UInt16(0))
        try writer.write(STUNMessageView.magicCookie)
        try writer.write(transactionID.high)
        try writer.write(transactionID.middle)
        try writer.write(transactionID.low)
    }

    /// Bytes written so far: the message's size once the last attribute is in.
    public var count: Int { writer.offset }

    /// Appends an attribute with `value`, padded to 4 bytes with zeros.
    public mutating func append(_ type: UInt16, value: UnsafeRawBufferPointer) throws(WireError) {
        guard value.count <= Int(UInt16.max) else { throw .malformed(.stunMessage, reason: "attribute longer than 65535 bytes") }
        try writer.write(type)
        try writer.write(UInt16(value.count))
        try writer.write(value)
        try writer.writeZeros((4 - value.count % 4) % 4)
        try updateLength()
    }

    public mutating func append<Bytes: Collection>(_ type: UInt16, bytes: Bytes) throws(WireError) where Bytes.Element == UInt8 {
        guard bytes.count <= Int(UInt16.max) else { throw .malformed(.stunMessage, reason: "attribute longer than 65535 bytes") }
        try writer.write(type)
        try writer.write(UInt16(bytes.count))
        try writer.write(contentsOf: bytes)
        try writer.writeZeros((4 - bytes.count % 4) % 4)
        try updateLength()
    }

    public mutating func appendUsername(_ username: String) throws(WireError) {
        guard username.utf8.count <= STUNAttribute.maximumUsernameSize else { throw .malformed(.stunMessage, reason: "USERNAME longer than 513 bytes") }
        try append(STUNAttribute.username, bytes: username.utf8)
    }

    public mutating func appendPriority(_ priority: UInt32) throws(WireError) {
        try appendHeader(STUNAttribute.priority, length: 4)
        try writer.write(priority)
        try updateLength()
    }

    public mutating func appendUseCandidate() throws(WireError) {
        try appendHeader(STUNAttribute.useCandidate, length: 0)
        try updateLength()
    }

    public mutating func appendICERole(isControlling: Bool, tieBreaker: UInt64) throws(WireError) {
        try appendHeader(isControlling ? STUNAttribute.iceControlling : STUNAttribute.iceControlled, length: 8)
        try writer.write(tieBreaker)
        try updateLength()
    }

    /// XOR-MAPPED-ADDRESS: where the request came from, as the responder saw it.
    public mutating func appendXORMappedAddress(_ address: STUNAddress) throws(WireError) {
        try appendHeader(STUNAttribute.xorMappedAddress, length: address.valueSize)
        try writer.write(UInt8(0))
        let cookie = STUNMessageView.magicCookie
        switch address {
        case let .ipv4(host, port):
            try writer.write(UInt8(0x01))
            try writer.write(port ^ UInt16(cookie >> 16))
            try writer.write(host ^ cookie)
        case let .ipv6(high, low, port):
            try writer.write(UInt8(0x02))
            try writer.write(port ^ UInt16(cookie >> 16))
            let (maskHigh, maskLow) = STUNAddress.ipv6Mask(transactionID)
            try writer.write(high ^ maskHigh)
            try writer.write(low ^ maskLow)
        }
        try updateLength()
    }

    /// ERROR-CODE (RFC 8489 §14.8) with a short reason phrase.
    public mutating func appendErrorCode(_ code: UInt16, reason: String) throws(WireError) {
        guard (300...699).contains(code) else { throw .malformed(.stunMessage, reason: "error code out of range") }
        var value: [UInt8] = [0, 0, UInt8(code / 100), UInt8(code % 100)]
        value += Array(reason.prefix(utf8Bytes: 127).utf8)
        try append(STUNAttribute.errorCode, bytes: value)
    }

    /// MESSAGE-INTEGRITY: `hmac` is given the message so far (its length already counting this
    /// attribute) and writes the 20-byte HMAC-SHA1 of it, keyed with the short-term password.
    public mutating func appendMessageIntegrity(
        _ hmac: (_ message: UnsafeRawBufferPointer, _ into: UnsafeMutableRawBufferPointer) -> Void
    ) throws(WireError) {
        let start = writer.offset
        try appendHeader(STUNAttribute.messageIntegrity, length: STUNMessageView.integritySize)
        try writer.writeZeros(STUNMessageView.integritySize)
        try updateLength()
        let buffer = writer.buffer
        hmac(UnsafeRawBufferPointer(rebasing: buffer[0..<start]),
             UnsafeMutableRawBufferPointer(rebasing: buffer[(start + 4)..<(start + 4 + STUNMessageView.integritySize)]))
    }

    /// FINGERPRINT: the last attribute, a CRC-32 of everything before it.
    public mutating func appendFingerprint() throws(WireError) {
        let start = writer.offset
        try appendHeader(STUNAttribute.fingerprint, length: 4)
        try updateLength(adding: 4)
        var crc = CRC32()
        crc.update(UnsafeRawBufferPointer(rebasing: writer.buffer[0..<start]))
        try writer.write(crc.value ^ STUNMessageView.fingerprintXOR)
    }

    private var transactionID: STUNTransactionID {
        STUNTransactionID(UnsafeRawBufferPointer(rebasing: writer.buffer[8..<20]))
    }

    private mutating func appendHeader(_ type: UInt16, length: Int) throws(WireError) {
        try writer.require(4 + length)
        try writer.write(type)
        try writer.write(UInt16(length))
    }

    /// Rewrites the header's length to cover what is written, plus `adding` bytes to come.
    private mutating func updateLength(adding extra: Int = 0) throws(WireError) {
        let length = writer.offset + extra - STUNMessageView.headerSize
        guard length <= Int(UInt16.max) else { throw .malformed(.stunMessage, reason: "message longer than 65535 bytes") }
        writer.buffer.storeBytes(of: UInt16(length).bigEndian, toByteOffset: 2, as: UInt16.self)
    }
}
