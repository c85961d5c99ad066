/// A bounds-checked, big-endian cursor over bytes owned by someone else.
///
/// Parsers read through a `ByteReader` so that every length in a packet is checked
/// before it is trusted, and so that payloads are handed out as slices of the
/// original memory rather than copies. The reader never outlives the bytes: it is
/// a value used inside the caller's `withUnsafeBytes` scope.
public struct ByteReader {
    /// The whole buffer being read; offsets are relative to its start.
    public let bytes: UnsafeRawBufferPointer
    /// The position of the next byte to read.
    public private(set) var offset: Int
    /// What a truncation error should name.
    public var element: WireElement

    public init(_ bytes: UnsafeRawBufferPointer, element: WireElement, offset: Int = 0) {
        self.bytes = bytes
        self.offset = offset
        self.element = element
    }

    /// Bytes not yet read.
    public var remaining: Int { bytes.count - offset }

    public var isAtEnd: Bool { offset >= bytes.count }

    mutating func require(_ count: Int) throws(WireError) {
        guard count >= 0, count <= bytes.count - offset else {
            throw .truncated(element, needed: offset + count, available: bytes.count)
        }
    }

    public mutating func readUInt8() throws(WireError) -> UInt8 {
        try require(1)
        defer { offset += 1 }
        return bytes[offset]
    }

    public mutating func readUInt16() throws(WireError) -> UInt16 {
        try require(2)
        defer { offset += 2 }
        return UInt16(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt16.self))
    }

    /// Reads a 24-bit big-endian unsigned integer (RTCP's cumulative loss).
    public mutating func readUInt24() throws(WireError) -> UInt32 {
        try require(3)
        defer { offset += 3 }
        return UInt32(bytes[offset]) << 16 | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2])
    }

    public mutating func readUInt32() throws(WireError) -> UInt32 {
        try require(4)
        defer { offset += 4 }
        return UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }

    public mutating func readUInt64() throws(WireError) -> UInt64 {
        try require(8)
        defer { offset += 8 }
        return UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }

    /// Returns the next `count` bytes as a slice of the original memory (no copy).
    public mutating func readBytes(_ count: Int) throws(WireError) -> UnsafeRawBufferPointer {
        try require(count)
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
    }

    public mutating func skip(_ count: Int) throws(WireError) {
        try require(count)
        offset += count
    }

    /// Reads a length-prefixed UTF-8 string whose length is one byte.
    public mutating func readString8() throws(WireError) -> String {
        let count = Int(try readUInt8())
        return try decodeUTF8(try readBytes(count))
    }

    /// Reads a length-prefixed UTF-8 string whose length is two bytes.
    public mutating func readString16() throws(WireError) -> String {
        let count = Int(try readUInt16())
        return try decodeUTF8(try readBytes(count))
    }

    private func decodeUTF8(_ raw: UnsafeRawBufferPointer) throws(WireError) -> String {
        guard let string = String(validating: raw, as: UTF8.self) else {
            throw .malformed(element, reason: "text is not valid UTF-8")
        }
        return string
    }
}

/// A bounds-checked, big-endian cursor that writes into memory the caller owns.
///
/// Serialisers first report their size, the caller provides a buffer at least that
/// large, and the writer fills it; nothing on this path allocates.
public struct ByteWriter {
    public let buffer: UnsafeMutableRawBufferPointer
    /// The number of bytes written so far.
    public private(set) var offset: Int

    public init(_ buffer: UnsafeMutableRawBufferPointer, offset: Int = 0) {
        self.buffer = buffer
        self.offset = offset
    }

    public var remaining: Int { buffer.count - offset }

    mutating func require(_ count: Int) throws(WireError) {
        guard count <= buffer.count - offset else {
            throw .outputTooSmall(needed: offset + count, available: buffer.count)
        }
    }

    public mutating func write(_ value: UInt8) throws(WireError) {
        try require(1)
        buffer[offset] = value
        offset += 1
    }

    public mutating func write(_ value: UInt16) throws(WireError) {
        try require(2)
        buffer.storeBytes(of: value.bigEndian, toByteOffset: offset, as: UInt16.self)
        offset += 2
    }

    /// Writes the low 24 bits of `value`, big-endian.
    public mutating func writeUInt24(_ value: UInt32) throws(WireError) {
        try require(3)
        buffer[offset] = UInt8(truncatingIfNeeded: value >> 16)
        buffer[offset + 1] = UInt8(truncatingIfNeeded: value >> 8)
        buffer[offset + 2] = UInt8(truncatingIfNeeded: value)
        offset += 3
    }

    public mutating func write(_ value: UInt32) throws(WireError) {
        try require(4)
        buffer.storeBytes(of: value.bigEndian, toByteOffset: offset, as: UInt32.self)
        offset += 4
    }

    public mutating func write(_ value: UInt64) throws(WireError) {
        try require(8)
        buffer.storeBytes(of: value.bigEndian, toByteOffset: offset, as: UInt64.self)
        offset += 8
    }

    public mutating func write(_ bytes: UnsafeRawBufferPointer) throws(WireError) {
        try require(bytes.count)
        if let base = bytes.baseAddress, !bytes.isEmpty {
            (buffer.baseAddress! + offset).copyMemory(from: base, byteCount: bytes.count)
        }
        offset += bytes.count
    }

    public mutating func write<Bytes: Collection>(contentsOf bytes: Bytes) throws(WireError) where Bytes.Element == UInt8 {
        try require(bytes.count)
        for byte in bytes {
            buffer[offset] = byte
            offset += 1
        }
    }

    public mutating func writeZeros(_ count: Int) throws(WireError) {
        try require(count)
        if count > 0 {
            (buffer.baseAddress! + offset).initializeMemory(as: UInt8.self, repeating: 0, count: count)
        }
        offset += count
    }

    /// Writes `string` as UTF-8 after a one-byte length; fails if it is longer than 255 bytes.
    public mutating func writeString8(_ string: String, element: WireElement) throws(WireError) {
        let count = string.utf8.count
        guard count <= Int(UInt8.max) else { throw .malformed(element, reason: "text longer than 255 bytes") }
        try write(UInt8(count))
        try write(contentsOf: string.utf8)
    }

    /// Writes `string` as UTF-8 after a two-byte length; fails if it is longer than 65,535 bytes.
    public mutating func writeString16(_ string: String, element: WireElement) throws(WireError) {
        let count = string.utf8.count
        guard count <= Int(UInt16.max) else { throw .malformed(element, reason: "text longer than 65535 bytes") }
        try write(UInt16(count))
        try write(contentsOf: string.utf8)
    }
}

extension String {
    /// The longest start of the string, in whole characters, that takes at most `limit`
    /// bytes of UTF-8: what fits a length field, cut where a reader sees a character end.
    public func prefix(utf8Bytes limit: Int) -> String {
        guard utf8.count > limit else { return self }
        var result = ""
        var bytes = 0
        for character in self {
            bytes += character.utf8.count
            guard bytes <= limit else { break }
            result.append(character)
        }
        return result
    }
}

extension Array where Element == UInt8 {
    /// Serialises with a size query then a write, the two-step pattern every ParleyWire
    /// serialiser follows; for tests and cold paths that want an array.
    public init(
        serializedSize: Int,
        _ body: (inout ByteWriter) throws(WireError) -> Void
    ) throws(WireError) {
        var result = [UInt8](repeating: 0, count: serializedSize)
        var failure: WireError?
        let written = result.withUnsafeMutableBytes { raw -> Int in
            var writer = ByteWriter(raw)
            do throws(WireError) { try body(&writer) } catch { failure = error }
            return writer.offset
        }
        if let failure { throw failure }
        result.removeLast(serializedSize - written)
        self = result
    }
}
