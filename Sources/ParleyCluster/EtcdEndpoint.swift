import NIOCore
import NIOSSL
import ParleyBasics
import ParleyRelay

/// Where etcd's client API listens: `http://HOST:PORT`, or `https://HOST:PORT` for a store
/// reached over TLS (the JSON gateway on etcd's client port, either way).
public struct EtcdEndpoint: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var usesTLS: Bool

    public init(host: String, port: Int, usesTLS: Bool = false) {
        self.host = host
        self.port = port
        self.usesTLS = usesTLS
    }

    static let example = "e.g. https://10.0.0.2:2379, or http://127.0.0.1:2379 on a private network"

    /// "https://10.0.0.2:2379", "http://127.0.0.1" (port 2379); the error says what to write.
    public init(parsing text: String) throws(ConfigurationError) {
        let lowered = text.lowercased()
        let rest: Substring
        if lowered.hasPrefix("https://") {
            usesTLS = true
            rest = text.dropFirst("https://".count)
        } else if lowered.hasPrefix("http://") {
            usesTLS = false
            rest = text.dropFirst("http://".count)
        } else {
            throw ConfigurationError("is \"\(text)\"; write etcd's client URL, \(Self.example)")
        }
        let authority = rest.hasSuffix("/") ? rest.dropLast() : rest
        guard !authority.contains("/"), !authority.contains("@") else {
            throw ConfigurationError("is \"\(text)\"; write only the scheme, host and port, \(Self.example) (a user goes in cluster-user)")
        }
        let parts: HostPortText
        do {
            parts = try HostPortText(parsing: authority)
        } catch {
            throw ConfigurationError("is \"\(text)\"; \(error), \(Self.example)")
        }
        let port = parts.port ?? 2379
        guard port >= 1 else { throw ConfigurationError("is \"\(text)\"; the port must be from 1 to 65535") }
        // An IP address, or a host name as certificates name hosts.
        let isAddress = (try? SocketAddress(ipAddress: String(parts.host), port: port)) != nil
        let isName = !parts.host.isEmpty && parts.host.utf8.count <= 253
            && parts.host.utf8.allSatisfy { $0 == 0x2D || $0 == 0x2E || ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) }
        guard isAddress || isName else {
            throw ConfigurationError("is \"\(text)\"; \"\(parts.host)\" is neither an IP address nor a host name, \(Self.example)")
        }
        host = String(parts.host)
        self.port = port
    }

    /// The URL of `path` on the gateway.
    func url(_ path: String) -> String { "\(usesTLS ? "https" : "http")://\(HostPortText.format(host: host, port: port))\(path)" }

    public var description: String { url("") }
}

/// How the relay and etcd prove themselves to each other, beyond the URL's scheme: the CA
/// that signed etcd's certificate, the relay's client certificate (etcd's
/// `--client-cert-auth`), and an etcd user and its password (etcd's authentication, with a
/// role that may read and write `/parley/`). Each is a file path, read at start.
public struct EtcdCredentials: Sendable, Equatable {
    /// PEM: the CA (or CAs) etcd's certificate must chain to. Nil: the system's trusted CAs.
    public var certificateAuthorityFile: String?
    /// PEM: the relay's client certificate, and its private key.
    public var certificateFile: String?
    public var keyFile: String?
    /// An etcd user, and a file holding its password (one line).
    public var user: String?
    public var passwordFile: String?

    public init(certificateAuthorityFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil, user: String? = nil,
                passwordFile: String? = nil) {
        self.certificateAuthorityFile = certificateAuthorityFile
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        self.user = user
        self.passwordFile = passwordFile
    }

    /// A user and its password, as read from the files.
    struct Login: Sendable {
        var user: String
        var password: String
    }

    /// Checks that the settings make sense together for `endpoint`; the message names the
    /// settings as `parley-relay serve` takes them.
    func check(for endpoint: EtcdEndpoint) throws(ConfigurationError) {
        if !endpoint.usesTLS {
            if certificateAuthorityFile != nil || certificateFile != nil || keyFile != nil {
                throw ConfigurationError("cluster-ca, cluster-cert and cluster-key are for a store reached over TLS; write the cluster URL with https://, e.g. https://10.0.0.2:2379")
            }
            if user != nil || passwordFile != nil {
                throw ConfigurationError("cluster-user would send etcd's password in the clear over http://; reach etcd over TLS (https:// in the cluster URL, and cluster-ca for its CA)")
            }
        }
        if (certificateFile == nil) != (keyFile == nil) {
            throw ConfigurationError("cluster-cert and cluster-key go together: the relay's client certificate and its private key, both PEM files")
        }
        if (user == nil) != (passwordFile == nil) {
            throw ConfigurationError("cluster-user and cluster-password-file go together: an etcd user, and a file holding its password")
        }
    }

    /// The TLS settings for `endpoint` (nil for http://), its files read and checked.
    func tlsConfiguration(for endpoint: EtcdEndpoint) throws(ConfigurationError) -> TLSConfiguration? {
        try check(for: endpoint)
        guard endpoint.usesTLS else { return nil }
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        if let certificateAuthorityFile {
            tls.trustRoots = .certificates(try Self.certificates(certificateAuthorityFile, setting: "cluster-ca"))
        }
        if let certificateFile, let keyFile {
            tls.certificateChain = try Self.certificates(certificateFile, setting: "cluster-cert").map { .certificate($0) }
            do {
                tls.privateKey = .privateKey(try NIOSSLPrivateKey(bytes: Array(try Self.text(keyFile, setting: "cluster-key").utf8), format: .pem))
            } catch let error as ConfigurationError {
                throw error
            } catch {
                throw ConfigurationError("cluster-key \(keyFile) is not a PEM private key (\(error)); give the key the relay's client certificate was made for")
            }
        }
        do {
            // Made once here so a key that does not match its certificate is found at start.
            _ = try NIOSSLContext(configuration: tls)
        } catch {
            throw ConfigurationError("the cluster's TLS settings do not work together (\(error)); check that cluster-key is the key of cluster-cert")
        }
        return tls
    }

    /// The user and password, the password file read (its first line, without spaces around).
    func login() throws(ConfigurationError) -> Login? {
        guard let user, let passwordFile else { return nil }
        guard !user.isEmpty, user.utf8.count <= 128, user.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F }) else {
            throw ConfigurationError("cluster-user is \"\(user)\"; give the etcd user's name, 1 to 128 characters without spaces")
        }
        let text = try Self.text(passwordFile, setting: "cluster-password-file")
        let password = String(text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first ?? "").trimmingWhitespace
        guard !password.isEmpty else {
            throw ConfigurationError("cluster-password-file \(passwordFile) is empty; put etcd's password for \(user) on its first line")
        }
        return Login(user: user, password: password)
    }

    private static func text(_ path: String, setting: String) throws(ConfigurationError) -> String {
        try FileText.read(path: path, what: "file of \(setting)", hint: "check the path, and that the relay's user may read it")
    }

    private static func certificates(_ path: String, setting: String) throws(ConfigurationError) -> [NIOSSLCertificate] {
        let text = try text(path, setting: setting)
        let certificates: [NIOSSLCertificate]
        do {
            certificates = try NIOSSLCertificate.fromPEMBytes(Array(text.utf8))
        } catch {
            throw ConfigurationError("\(setting) \(path) is not a PEM certificate (\(error)); give the file that begins with -----BEGIN CERTIFICATE-----")
        }
        guard !certificates.isEmpty else {
            throw ConfigurationError("\(setting) \(path) holds no certificate; give the file that begins with -----BEGIN CERTIFICATE-----")
        }
        return certificates
    }
}
