import ParleyWire

/// How a relay joins a cluster (`--cluster`, `--public-address`, `--region`); nil in
/// ``RelayConfiguration`` for a relay on its own, which never touches a store.
public struct ClusterSettings: Sendable, Equatable {
    /// etcd's client URL.
    public var endpoint: EtcdEndpoint
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

    public init(endpoint: EtcdEndpoint, publicAddress: HostAndPort, region: String? = nil) {
        self.endpoint = endpoint
        self.publicAddress = publicAddress
        self.region = region
    }

    /// Regions follow the room-name rule, shorter: letters, digits, '.', '_' and '-', 1 to 32.
    public static func problem(withRegion region: String) -> String? {
        guard (1...32).contains(region.utf8.count), ParleyNames.problem(withRoom: region) == nil else {
            return "is \"\(region)\"; a region is 1 to 32 letters, digits, '.', '_' or '-', e.g. eu-west"
        }
        return nil
    }

    func validate() throws(ConfigurationError) {
        let host = publicAddress.host
        guard host != "0.0.0.0", host != "::", publicAddress.port != 0 else {
            throw ConfigurationError("public-address is \(publicAddress); give the address and port clients reach this relay at, e.g. 198.51.100.7:7800, not a wildcard")
        }
        if let region, let problem = Self.problem(withRegion: region) { throw ConfigurationError("region \(problem)") }
        guard (2...60).contains(leaseTTLSeconds) else { throw ConfigurationError("the cluster lease is \(leaseTTLSeconds) s; it must be from 2 to 60 s") }
    }
}
