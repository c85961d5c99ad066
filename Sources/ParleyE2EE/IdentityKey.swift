import Crypto
import ParleyBasics

/// A person's long-term identity in end-to-end encrypted rooms: an X25519 key pair, made on
/// first use and kept in their config folder (``IdentityKey/loadOrCreate(at:)``). Other
/// members seal their media keys to its public half; its fingerprint is shown beside the
/// person's name, and two people compare a safety number made from both their keys.
public struct IdentityKey: @unchecked Sendable {
    public let privateKey: Curve25519.KeyAgreement.PrivateKey

    public init(privateKey: Curve25519.KeyAgreement.PrivateKey = .init()) {
        self.privateKey = privateKey
    }

    /// The public key as it travels in a join and a roster (32 bytes).
    public var publicKeyBytes: [UInt8] { Array(privateKey.publicKey.rawRepresentation) }

    private static let header = "parley identity v1"

    /// The file's text: a header line, a comment for a person who opens it, then the private
    /// key in base64url.
    public var fileText: String {
        """
        \(Self.header)
        # Your identity in end-to-end encrypted Parley rooms: whoever holds this file can speak as
        # you and open the keys people send you. Keep it private (mode 0600). Its fingerprint is
        # \(Fingerprint.of(publicKeyBytes)).
        \(Base64URL.encode(privateKey.rawRepresentation))

        """
    }

    public init(fileText text: String, source: String) throws(TextFile.Failure) {
        let lines = text.split(whereSeparator: \.isNewline).map(\.trimmingWhitespace).filter { !$0.isEmpty && !$0.hasPrefix("#") }
        guard lines.first == Self.header, lines.count == 2 else {
            throw TextFile.Failure(description: "\(source) is not a Parley identity file (its first line should be \"\(Self.header)\")", isMissing: false)
        }
        guard let raw = Base64URL.decode(lines[1]), let key = try? Curve25519.KeyAgreement.PrivateKey(rawRepresentation: raw) else {
            throw TextFile.Failure(description: "\(source) holds no valid identity key; move it away and a new identity is made at the next call", isMissing: false)
        }
        privateKey = key
    }

    /// The identity in `path`, or a new one written there (mode 0600, its folder made 0700).
    /// Refuses a file other users can read, as ssh does: whoever read it can speak as you.
    public static func loadOrCreate(at path: String) throws(TextFile.Failure) -> (key: IdentityKey, created: Bool) {
        do throws(TextFile.Failure) {
            let text = try TextFile.read(path: path, what: "identity file", hint: "")
            if let mode = TextFile.openToOthers(path: path) {
                throw TextFile.Failure(
                    description: "the identity file \(path) can be read by other users (mode \(String(mode, radix: 8))); run `chmod 600 \(path)` and call again",
                    isMissing: false)
            }
            return (try IdentityKey(fileText: text, source: path), false)
        } catch where error.isMissing {
            let key = IdentityKey()
            if let slash = path.lastIndex(of: "/"), slash != path.startIndex {
                try TextFile.makePrivateDirectory(String(path[..<slash]))
            }
            try TextFile.writePrivately(key.fileText, to: path, replacing: false, exists: "\(path) appeared while a new identity was being made; call again")
            return (key, true)
        }
    }

    /// Where an identity lives unless `--identity` says otherwise:
    /// `$XDG_CONFIG_HOME/parley/identity`, else `~/.config/parley/identity`; nil without a home.
    public static func defaultPath(environment: [String: String]) -> String? {
        configFolder(environment: environment).map { $0 + "/identity" }
    }

    /// Parley's folder in the person's config folder.
    public static func configFolder(environment: [String: String]) -> String? {
        if let config = environment["XDG_CONFIG_HOME"], config.hasPrefix("/") { return config + "/parley" }
        guard let home = environment["HOME"], home.hasPrefix("/") else { return nil }
        return home + "/.config/parley"
    }
}
