/// CRC-32 as ISO-HDLC, Ethernet and zlib compute it (reflected polynomial 0xEDB88320, initial
/// value and final XOR all ones): what STUN's FINGERPRINT carries (RFC 8489 §14.7).
///
/// Not cryptographic: it tells STUN from other protocols on a shared port, nothing more.
public struct CRC32: Sendable {
    private var state: UInt32 = 0xFFFF_FFFF

    public init() {}

    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        var crc = state
        for byte in bytes {
            crc = Self.table[Int(UInt8(truncatingIfNeeded: crc) ^ byte)] ^ (crc >> 8)
        }
        state = crc
    }

    public var value: UInt32 { state ^ 0xFFFF_FFFF }

    /// The CRC of each byte value, one table lookup a byte.
    private static let table: [UInt32] = (0..<256).map { index in
        var crc = UInt32(index)
        for _ in 0..<8 { crc = crc & 1 == 1 ? 0xEDB8_8320 ^ (crc >> 1) : crc >> 1 }
        return crc
    }
}
