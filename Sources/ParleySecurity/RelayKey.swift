import Crypto
import ParleyBasics
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The relay's long-term X25519 key pair. Its public key travels in invites
/// (`…&key=<base64url>`) and clients pin it; its private key stays in the relay's secret file.
public struct RelayKey: Sendable {
    public let privateKey: Curve25519.KeyAgreement.PrivateKey

    public init() { privateKey = .init() }

    public init(privateKey: Curve25519.KeyAgreement.PrivateKey) { self.privateKey = privateKey }

    /// Reads the private key as written by ``privateKeyBase64``.
    public init(privateKeyBase64 text: String) throws(SecurityError) {
        guard let data = Data(base64Encoded: text.trimmingWhitespace), data.count == 32,
              let key = try? Curve25519.KeyAgreement.PrivateKey(rawRepresentation: data) else {
            throw .badKey("the relay private key must be 32 bytes in base64")
        }
        privateKey = key
    }

    public var publicKey: Curve25519.KeyAgreement.PublicKey { privateKey.publicKey }

    public var privateKeyBase64: String { privateKey.rawRepresentation.base64EncodedString() }

    /// The public key as it appears in invites: base64url without padding (43 characters).
    public var publicKeyText: String { Self.text(of: publicKey) }

    /// The first 8 bytes of SHA-256 of the public key, sent in cookie replies.
    public var keyID: [UInt8] { Self.keyID(of: publicKey) }

    public static func keyID(of publicKey: Curve25519.KeyAgreement.PublicKey) -> [UInt8] {
        Array(SHA256.hash(data: publicKey.rawRepresentation).prefix(8))
    }

    public static func text(of publicKey: Curve25519.KeyAgreement.PublicKey) -> String {
        Base64URL.encode(publicKey.rawRepresentation)
    }

    /// Reads a public key in invite form (base64url, padding optional).
    public static func publicKey(fromText text: String) throws(SecurityError) -> Curve25519.KeyAgreement.PublicKey {
        guard let data = Base64URL.decode(text.trimmingWhitespace, allowingPadding: true), data.count == 32,
              let key = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: data) else {
            throw .badKey("a relay public key is 43 characters of base64url (from the invite's key=…)")
        }
        return key
    }
}
