import Crypto
import ParleyWire

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A ``MediaKeyPackage`` sealed by one member to another with HPKE (RFC 9180) in auth mode:
/// only the recipient's identity key opens it, and opening proves it was sealed with the
/// sender's identity key. The relay carries the bytes and can do nothing with them.
///
/// ```
/// sealed = enc (32) ‖ AES-128-GCM(package) (package + 16)
/// suite  = DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM   (what WebCrypto also runs)
/// info   = "parley e2ee v1 media key" ‖ room ‖ sender's name ‖ recipient's name  (each length-prefixed)
/// ```
///
/// The info binds a package to its room and to both names, so a relay cannot hand a package
/// to another room or present it as someone else's. Auth mode has no key-compromise
/// impersonation resistance: whoever steals your identity file can also forge packages *to
/// you* from others (SECURITY.md).
public enum SealedMediaKey {
    static let suite = HPKE.Ciphersuite(kem: .Curve25519_HKDF_SHA256, kdf: .HKDF_SHA256, aead: .AES_GCM_128)
    static let encapsulationSize = 32

    /// Why a package could not be sealed or opened.
    public enum Failure: Error, Sendable, Hashable, CustomStringConvertible {
        /// The recipient's key is not an X25519 public key.
        case badRecipientKey
        /// It does not open with our key and the sender's: tampered with, for someone else,
        /// or not from that sender.
        case doesNotOpen
        case malformed(WireError)

        public var description: String {
            switch self {
            case .badRecipientKey: return "the member's identity key is not an X25519 key"
            case .doesNotOpen: return "a media key that does not open with this member's identity (tampered with, or not from who the relay says)"
            case let .malformed(error): return "a media key package that cannot be read: \(error)"
            }
        }
    }

    static func info(room: String, sender: String, recipient: String) -> Data {
        var info = Array("parley e2ee v1 media key".utf8)
        for field in [room, sender, recipient] {
            let bytes = Array(field.utf8.prefix(255))
            info.append(UInt8(bytes.count))
            info += bytes
        }
        return Data(info)
    }

    public static func seal(
        _ package: MediaKeyPackage, to recipientKey: [UInt8], recipient: String, from sender: IdentityKey, senderName: String, room: String
    ) throws(Failure) -> [UInt8] {
        guard let publicKey = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: recipientKey) else { throw .badRecipientKey }
        let plaintext: [UInt8]
        do { plaintext = try package.serialized() } catch { throw .malformed(error) }
        do {
            var context = try HPKE.Sender(
                recipientKey: publicKey, ciphersuite: suite, info: info(room: room, sender: senderName, recipient: recipient),
                authenticatedBy: sender.privateKey)
            let ciphertext = try context.seal(plaintext)
            return Array(context.encapsulatedKey) + Array(ciphertext)
        } catch {
            throw .badRecipientKey
        }
    }

    public static func open(
        _ sealed: [UInt8], by recipient: IdentityKey, recipientName: String, from senderKey: [UInt8], senderName: String, room: String
    ) throws(Failure) -> MediaKeyPackage {
        guard sealed.count > encapsulationSize,
              let publicKey = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: senderKey) else { throw .doesNotOpen }
        let plaintext: Data
        do {
            var context = try HPKE.Recipient(
                privateKey: recipient.privateKey, ciphersuite: suite, info: info(room: room, sender: senderName, recipient: recipientName),
                encapsulatedKey: Data(sealed[..<encapsulationSize]), authenticatedBy: publicKey)
            plaintext = try context.open(sealed[encapsulationSize...])
        } catch {
            throw .doesNotOpen
        }
        let parsed = Array(plaintext).withUnsafeBytes { raw -> Result<MediaKeyPackage, WireError> in
            do throws(WireError) { return .success(try MediaKeyPackage(parsing: raw)) } catch { return .failure(error) }
        }
        switch parsed {
        case let .success(package): return package
        case let .failure(error): throw .malformed(error)
        }
    }
}
