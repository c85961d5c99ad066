import ParleyBasics
import ParleySecurity

/// The relay's secret file, written by `parley-relay keygen`: a `KeyValueFile` with
///
/// ```
/// token-secret = <base64 of 32 random bytes>
/// relay-private-key = <base64 of the relay's X25519 private key>
/// admin-token = <base64url of 32 random bytes>
/// ```
///
/// The token secret signs access tokens; the private key is the relay's long-term identity
/// in the encrypted handshake (its public key travels in invites and clients pin it); the
/// admin token opens the admin API (``AdminAPI``). The file is created with mode 0600 and
/// never overwritten unless asked.
public struct SecretFile: Sendable {
    public static let tokenSecretKey = "token-secret"
    public static let relayPrivateKeyKey = "relay-private-key"
    public static let adminTokenKey = "admin-token"
    public static let knownKeys = [tokenSecretKey, relayPrivateKeyKey, adminTokenKey]

    public var tokenSecret: TokenSecret
    /// Nil only in files written before the secure transport; such a relay can run `--insecure` only.
    public var relayKey: RelayKey?
    /// Nil in files written before the admin API; such a relay runs without it.
    public var adminToken: AdminToken?

    public init(tokenSecret: TokenSecret, relayKey: RelayKey?, adminToken: AdminToken? = nil) {
        self.tokenSecret = tokenSecret
        self.relayKey = relayKey
        self.adminToken = adminToken
    }

    /// A new token secret, key pair and admin token.
    public static func random() -> SecretFile { SecretFile(tokenSecret: .random(), relayKey: RelayKey(), adminToken: .random()) }

    public var text: String {
        var text = """
        # parley-relay secret. Anyone who holds this file can mint access tokens for this relay
        # and impersonate it: keep it readable by the relay's user only (mode 0600) and out of
        # backups you share. Make a new one with `parley-relay keygen --out FILE --force`; old
        # tokens and invites then stop working (see SECURITY.md, "Rotating keys").
        \(Self.tokenSecretKey) = \(tokenSecret.base64)

        """
        if let relayKey {
            text += """
            # The relay's X25519 private key; its public key is \(relayKey.publicKeyText)
            \(Self.relayPrivateKeyKey) = \(relayKey.privateKeyBase64)

            """
        }
        if let adminToken {
            text += """
            # Opens the admin API (list rooms, kick, mute, close) on the admin port: `parley-relay admin`
            # reads it from here; curl sends it as `Authorization: Bearer <token>`.
            \(Self.adminTokenKey) = \(adminToken.text)

            """
        }
        return text
    }

    public init(parsing text: String, source: String) throws(ConfigurationError) {
        let file = try KeyValueFile(parsing: text, source: source)
        try file.checkKeys(known: Self.knownKeys)
        guard let entry = file[Self.tokenSecretKey] else {
            throw ConfigurationError("\(source) has no \(Self.tokenSecretKey) line; make a secret file with `parley-relay keygen --out \(source)`")
        }
        do {
            tokenSecret = try TokenSecret(base64: entry.value)
        } catch {
            throw ConfigurationError("\(source):\(entry.line): \(error)")
        }
        if let keyEntry = file[Self.relayPrivateKeyKey] {
            do {
                relayKey = try RelayKey(privateKeyBase64: keyEntry.value)
            } catch {
                throw ConfigurationError("\(source):\(keyEntry.line): \(error); make a new secret file with `parley-relay keygen --out \(source) --force`")
            }
        } else {
            relayKey = nil
        }
        if let tokenEntry = file[Self.adminTokenKey] {
            do {
                adminToken = try AdminToken(text: tokenEntry.value)
            } catch {
                throw ConfigurationError("\(source):\(tokenEntry.line): \(error.message)")
            }
        } else {
            adminToken = nil
        }
    }

    /// Reads and parses `path`. Warns through `warn` when others may read the file.
    public static func load(path: String, warn: (String) -> Void = { _ in }) throws(ConfigurationError) -> SecretFile {
        let text = try FileText.read(path: path, what: "secret file", hint: "create one with `parley-relay keygen --out \(path)`")
        if let mode = TextFile.openToOthers(path: path) {
            warn("\(path) can be read by other users (mode \(String(mode, radix: 8))); run `chmod 600 \(path)`")
        }
        return try SecretFile(parsing: text, source: path)
    }

    /// Writes the file with mode 0600, whole. Without `overwrite`, an existing file is an error.
    public func write(path: String, overwrite: Bool) throws(ConfigurationError) {
        do {
            try TextFile.writePrivately(
                text, to: path, replacing: overwrite,
                exists: "\(path) already exists; pass --force to replace it (tokens signed with the old secret stop working)")
        } catch {
            throw ConfigurationError(error.description)
        }
    }
}
