import Crypto

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The relay's token-signing key: 32 random bytes (or more) shared only with whoever mints
/// tokens. It never appears in a log line or a description.
public struct TokenSecret: Sendable, CustomStringConvertible {
    /// HS256 keys shorter than the hash output weaken the MAC (RFC 7518 §3.2 requires at least 256 bits).
    public static let minimumByteCount = 32

    let key: SymmetricKey

    public init(bytes: some Collection<UInt8>) throws(TokenSecretError) {
        guard bytes.count >= Self.minimumByteCount else {
            throw .tooShort(byteCount: bytes.count)
        }
        key = SymmetricKey(data: Array(bytes))
    }

    /// A new secret from the system's secure random generator.
    public static func random() -> TokenSecret {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<Self.minimumByteCount).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return try! TokenSecret(bytes: bytes)  // exactly the minimum length
    }

    /// Base64 of the key, for the secret file only.
    public var base64: String {
        key.withUnsafeBytes { Data($0).base64EncodedString() }
    }

    public init(base64 text: String) throws(TokenSecretError) {
        guard let data = Data(base64Encoded: text) else { throw .notBase64 }
        try self.init(bytes: data)
    }

    public var description: String { "TokenSecret(redacted)" }
}

public enum TokenSecretError: Error, Sendable, Hashable, CustomStringConvertible {
    case tooShort(byteCount: Int)
    case notBase64

    public var description: String {
        switch self {
        case let .tooShort(count):
            return "the token secret has \(count) bytes; it needs at least \(TokenSecret.minimumByteCount) (run `parley-relay keygen` for a new one)"
        case .notBase64:
            return "the token secret is not valid base64 (run `parley-relay keygen` for a new one)"
        }
    }
}
