#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Base64 with the URL-safe alphabet (RFC 4648 §5): how JWTs carry their parts and how an
/// invite carries the relay's public key. Encoded without padding; decoded with or without.
public enum Base64URL {
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var text = Data(bytes).base64EncodedString()
        while text.last == "=" { text.removeLast() }
        return String(text.map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 })
    }

    /// Nil unless every character is in the URL-safe alphabet and the length is possible.
    /// `allowingPadding` accepts up to two `=` at the end (a key pasted from a tool that pads);
    /// a JWT never has them.
    public static func decode(_ text: some StringProtocol, allowingPadding: Bool = false) -> [UInt8]? {
        decode(Array(text.utf8), allowingPadding: allowingPadding)
    }

    public static func decode(_ text: some BidirectionalCollection<UInt8>, allowingPadding: Bool = false) -> [UInt8]? {
        var unpadded = text[...]
        if allowingPadding {
            while unpadded.last == UInt8(ascii: "=") { unpadded = unpadded.dropLast() }
        }
        guard text.count - unpadded.count <= 2, unpadded.count % 4 != 1 else { return nil }
        var standard: [UInt8] = []
        standard.reserveCapacity(unpadded.count + 3)
        for byte in unpadded {
            switch byte {
            case UInt8(ascii: "-"): standard.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): standard.append(UInt8(ascii: "/"))
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                standard.append(byte)
            default: return nil
            }
        }
        while standard.count % 4 != 0 { standard.append(UInt8(ascii: "=")) }
        return Data(base64Encoded: Data(standard)).map(Array.init)
    }
}
