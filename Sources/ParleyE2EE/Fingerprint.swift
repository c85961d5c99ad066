import Crypto

/// What people see of an identity key.
///
/// A **fingerprint** is short, beside a name in the roster ("3f9a c21e"): enough to notice a
/// key that changed, not to verify one. A **safety number** is made from two people's keys,
/// the same on both screens, thirty digits in six groups, read aloud to each other: if they
/// match, nobody stands between the two (no relay swapped either key).
public enum Fingerprint {
    /// Eight hex digits in two groups, from SHA-256 of the key.
    public static func of(_ publicKey: [UInt8]) -> String {
        let digest = Array(SHA256.hash(data: Array("parley e2ee v1 fingerprint".utf8) + publicKey))
        let hex = digest.prefix(4).map { byte in String(byte, radix: 16).count == 1 ? "0" + String(byte, radix: 16) : String(byte, radix: 16) }.joined()
        return String(hex.prefix(4)) + " " + String(hex.suffix(4))
    }

    /// The safety number of two keys: the same whichever of the two asks. Each five-digit
    /// group is five bytes of SHA-512 taken modulo 100,000 (about 16.6 bits each, 99.7 in
    /// all), over the keys in sorted order.
    public static func safetyNumber(_ one: [UInt8], _ other: [UInt8]) -> String {
        let (first, second) = one.lexicographicallyPrecedes(other) ? (one, other) : (other, one)
        let digest = Array(SHA512.hash(data: Array("parley e2ee v1 safety number".utf8) + first + second))
        return (0..<6).map { group in
            let value = digest[group * 5..<group * 5 + 5].reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 100_000
            let digits = String(value)
            return String(repeating: "0", count: 5 - digits.count) + digits
        }.joined(separator: " ")
    }
}
