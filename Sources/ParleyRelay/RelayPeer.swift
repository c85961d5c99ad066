import Crypto
import ParleySecurity

/// Another relay of the cluster: where it listens and the static key it proves in a trunk
/// handshake (`parley-relay keygen` wrote it; the cluster's store publishes it).
public struct RelayPeer: Sendable, Hashable, CustomStringConvertible {
    public var address: HostAndPort
    /// The X25519 public key, raw (32 bytes).
    public let publicKey: [UInt8]

    public init(address: HostAndPort, publicKey: Curve25519.KeyAgreement.PublicKey) {
        self.address = address
        self.publicKey = Array(publicKey.rawRepresentation)
    }

    /// `publicKeyText` as invites write it (43 characters of base64url).
    public init(address: HostAndPort, publicKeyText: String) throws(SecurityError) {
        self.init(address: address, publicKey: try RelayKey.publicKey(fromText: publicKeyText))
    }

    /// The key as invites and logs write it.
    public var publicKeyText: String { RelayKey.text(of: key) }

    var key: Curve25519.KeyAgreement.PublicKey {
        // Made only from a valid key, so reading it back cannot fail.
        try! Curve25519.KeyAgreement.PublicKey(rawRepresentation: publicKey)
    }

    public var description: String { "\(address) (key \(publicKeyText.prefix(8))…)" }
}
