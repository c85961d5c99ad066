import Crypto
import ParleyBasics

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The bearer token of the admin API (`Authorization: Bearer …`): 32 random bytes, written
/// as base64url by `parley-relay keygen` into the secret file's `admin-token` line. It never
/// appears in a log line or a description.
public struct AdminToken: Sendable, CustomStringConvertible {
    /// The token as the file and the header carry it.
    public let text: String
    private let digest: [UInt8]

    public static let byteCount = 32
    /// A shorter token is refused: the API can remove anyone from any room.
    public static let minimumLength = 32

    public init(text: String) throws(ConfigurationError) {
        guard text.utf8.count >= Self.minimumLength else {
            throw ConfigurationError("the admin-token is \(text.utf8.count) characters; it needs at least \(Self.minimumLength) (`openssl rand -base64 32` makes one)")
        }
        guard text.utf8.count <= 512, text.unicodeScalars.allSatisfy({ $0.isASCII && $0.value > 0x20 && $0.value < 0x7F }) else {
            throw ConfigurationError("the admin-token may hold only printable ASCII without spaces, at most 512 characters")
        }
        self.text = text
        digest = Array(SHA256.hash(data: Array(text.utf8)))
    }

    /// A new token from the system's secure random generator.
    public static func random() -> AdminToken {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<Self.byteCount).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return try! AdminToken(text: Base64URL.encode(bytes))  // 43 characters of base64url
    }

    /// Whether `presented` is this token, in time that does not depend on where they differ
    /// (both are hashed first, so neither does it depend on the presented length).
    public func matches(_ presented: some StringProtocol) -> Bool {
        let other = Array(SHA256.hash(data: Array(presented.utf8)))
        var difference: UInt8 = 0
        for index in 0..<digest.count { difference |= digest[index] ^ other[index] }
        return difference == 0
    }

    /// The value of an `Authorization` header that carries this token.
    public var authorizationHeader: String { "Bearer \(text)" }

    /// Never the token itself: a description may end up in a log.
    public var description: String { "AdminToken(redacted)" }
}
