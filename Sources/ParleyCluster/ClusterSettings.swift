import ParleyRelay
import ParleyWire

/// How a relay joins a cluster (`--cluster`, `--public-address`, `--region`, and the store's
/// TLS and user: `--cluster-ca`, `--cluster-cert`, `--cluster-key`, `--cluster-user`,
/// `--cluster-password-file`); none for a relay on its own, which never touches a store.
public struct ClusterSettings: Sendable, Equatable {
    /// etcd's client URL.
    public var endpoint: EtcdEndpoint
    /// What proves the relay to etcd and etcd to the relay, beyond the URL.
    public var credentials: EtcdCredentials
    /// Where clients reach this relay, as other relays send them there; also its ID.
    public var publicAddress: HostAndPort
    /// A name tokens may ask for (`"region"` claim), e.g. "eu-west".
    public var region: String?
    /// The lease's lifetime: a relay that dies loses its rooms this long after its last renewal.
    public var leaseTTLSeconds = 2
    /// How often the lease is renewed and the store brought in line (a quarter of the TTL,
    /// so two renewals can be lost before it expires).
    public var keepaliveMilliseconds = 500
    public var requestTimeoutMilliseconds = 1_000
    /// A room placed here that has had no member this long is given back.
    public var releaseEmptyRoomsAfterMilliseconds = 10_000

    public init(endpoint: EtcdEndpoint, credentials: EtcdCredentials = EtcdCredentials(), publicAddress: HostAndPort, region: String? = nil) {
        self.endpoint = endpoint
        self.credentials = credentials
        self.publicAddress = publicAddress
        self.region = region
    }

    /// Checks the settings, and reads the credentials' files, so that a relay that cannot
    /// reach its store for a reason a person can fix says so before it starts.
    public func validate() throws(ConfigurationError) {
        try Self.checkPublic(publicAddress)
        if let region, let problem = ParleyNames.problem(withRegion: region) { throw ConfigurationError("region \(problem)") }
        guard (2...60).contains(leaseTTLSeconds) else { throw ConfigurationError("the cluster lease is \(leaseTTLSeconds) s; it must be from 2 to 60 s") }
        _ = try credentials.tlsConfiguration(for: endpoint)
        _ = try credentials.login()
    }

    // MARK: `parley-relay serve`'s settings

    /// The settings as given, one key at a time; they make sense only together.
    public struct Given: Sendable {
        var endpoint: EtcdEndpoint?
        var publicAddress: HostAndPort?
        var region: String?
        var credentials = EtcdCredentials()
    }

    public static let settings: [Setting<Given>] = [
        Setting(key: "cluster", help: "etcd's client URL, e.g. https://10.0.0.2:2379, to run as a member of a cluster") { given, text throws(ConfigurationError) in
            given.endpoint = try EtcdEndpoint(parsing: text)
        },
        Setting(key: "public-address", help: "where clients reach this relay's UDP port, HOST:PORT: with cluster, and with web behind a NAT or port forward (browsers are told it)") { given, text throws(ConfigurationError) in
            do throws(ConfigurationError) {
                given.publicAddress = try HostAndPort(parsing: text)
            } catch {
                // The listen address's advice (0.0.0.0 for every interface) is wrong here.
                guard error.message.contains("not an IP address") else { throw error }
                throw ConfigurationError("is \"\(text)\"; give this relay's public IP address and port, e.g. 198.51.100.7:7800 "
                    + "(clients are sent there and other relays open trunks to it, without looking a name up)")
            }
        },
        Setting(key: "region", help: "with cluster: the region this relay serves, for tokens that name one") { given, text throws(ConfigurationError) in
            if let problem = ParleyNames.problem(withRegion: text) { throw ConfigurationError(problem) }
            given.region = text
        },
        Setting(key: "cluster-ca", help: "with an https:// cluster: PEM file of the CA that signed etcd's certificate (default: the system's)") {
            given, text throws(ConfigurationError) in
            given.credentials.certificateAuthorityFile = try path(text)
        },
        Setting(key: "cluster-cert", help: "with an https:// cluster: PEM file of this relay's client certificate, for etcd's --client-cert-auth") {
            given, text throws(ConfigurationError) in
            given.credentials.certificateFile = try path(text)
        },
        Setting(key: "cluster-key", help: "with cluster-cert: PEM file of its private key") { given, text throws(ConfigurationError) in
            given.credentials.keyFile = try path(text)
        },
        Setting(key: "cluster-user", help: "with an https:// cluster: the etcd user this relay logs in as (etcd's authentication)") {
            given, text throws(ConfigurationError) in
            guard !text.isEmpty else { throw ConfigurationError("is empty; give the etcd user's name") }
            given.credentials.user = text
        },
        Setting(key: "cluster-password-file", help: "with cluster-user: a file holding its password") { given, text throws(ConfigurationError) in
            given.credentials.passwordFile = try path(text)
        },
    ]

    public static var keys: [String] { settings.map(\.key) }

    private static func path(_ text: String) throws(ConfigurationError) -> String {
        guard !text.isEmpty else { throw ConfigurationError("is empty; give a file's path") }
        return text
    }

    /// The cluster settings from `layers`, checked and their files read; nil without `cluster`.
    /// `acceptsBrowsers`: the relay serves the browser page, which tells browsers
    /// `public-address` too, so it means something without a cluster.
    public static func resolve(_ layers: ConfigurationLayers, acceptsBrowsers: Bool = false) throws(ConfigurationError) -> ClusterSettings? {
        var given = Given()
        try layers.apply(settings, to: &given)
        return try given.settings(acceptsBrowsers: acceptsBrowsers)
    }

    /// `public-address` as given (nil if not): where clients reach this relay's UDP port. A
    /// cluster sends clients there; a relay behind a NAT, a port forward or a proxy tells
    /// browsers it as their ICE candidate, since the address it listens on is not theirs.
    public static func publicAddress(_ layers: ConfigurationLayers) throws(ConfigurationError) -> HostAndPort? {
        var given = Given()
        try layers.apply(settings, to: &given)
        if let address = given.publicAddress { try Self.checkPublic(address) }
        return given.publicAddress
    }

    static func checkPublic(_ address: HostAndPort) throws(ConfigurationError) {
        guard address.host != "0.0.0.0", address.host != "::", address.port != 0 else {
            throw ConfigurationError("public-address is \(address); give the address and port clients reach this relay at, e.g. 198.51.100.7:7800, not a wildcard")
        }
    }
}

extension ClusterSettings.Given {
    func settings(acceptsBrowsers: Bool) throws(ConfigurationError) -> ClusterSettings? {
        guard let endpoint else {
            let credentialsGiven = credentials != EtcdCredentials()
            if region != nil || credentialsGiven {
                throw ConfigurationError("region and the cluster-* settings are for a member of a cluster; "
                    + "add cluster (etcd's URL, e.g. --cluster https://10.0.0.2:2379) or leave them out")
            }
            if publicAddress != nil && !acceptsBrowsers {
                throw ConfigurationError("public-address is for a member of a cluster, or for browsers (web) reaching a relay behind a NAT or "
                    + "a port forward; add cluster (etcd's URL, e.g. --cluster https://10.0.0.2:2379) or web, or leave it out")
            }
            return nil
        }
        guard let publicAddress else {
            throw ConfigurationError("cluster needs public-address: where clients reach this relay, e.g. --public-address 198.51.100.7:7800, since other relays send clients there")
        }
        let settings = ClusterSettings(endpoint: endpoint, credentials: credentials, publicAddress: publicAddress, region: region)
        try settings.validate()
        return settings
    }
}
