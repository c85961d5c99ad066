import Foundation
import Logging
import ParleyCluster
import ParleyRelay
import ParleySecurity
import Testing

/// `--cluster`, `--public-address`, `--region` and the store's TLS and user: checked with
/// messages a person can act on, and what a member shows on /metrics.
@Suite("Cluster settings and metrics")
struct ClusterConfigurationTests {
    static func resolve(_ flags: [String: String]) throws(ConfigurationError) -> ClusterSettings? {
        let layers = ConfigurationLayers(flags: flags, environment: [:], file: nil)
        try layers.checkKeys(known: RelayConfiguration.keys + ClusterSettings.keys)
        return try ClusterSettings.resolve(layers)
    }

    @Test func aMemberNamesTheStoreAndWhereClientsReachIt() throws {
        let settings = try Self.resolve(["cluster": "http://127.0.0.1:2379", "public-address": "198.51.100.7:7800", "region": "eu-west"])
        #expect(settings == ClusterSettings(endpoint: EtcdEndpoint(host: "127.0.0.1", port: 2379),
                                            publicAddress: HostAndPort(host: "198.51.100.7", port: 7800), region: "eu-west"))
        #expect(try Self.resolve([:]) == nil, "no --cluster: a relay on its own")
    }

    /// The files of a store reached over TLS, made by a real etcd's set-up; the settings take
    /// them once they read and fit together.
    @Test func aMemberOfAStoreBehindTLSNamesItsCAItsCertificateAndItsUser() async throws {
        let etcd = try await EtcdServer.started(security: .tlsAndAuthentication)
        let credentials = etcd.credentials
        var flags = ["cluster": etcd.url, "public-address": "198.51.100.7:7800"]
        flags["cluster-ca"] = credentials.certificateAuthorityFile
        flags["cluster-cert"] = credentials.certificateFile
        flags["cluster-key"] = credentials.keyFile
        flags["cluster-user"] = credentials.user
        flags["cluster-password-file"] = credentials.passwordFile
        #expect(try Self.resolve(flags)?.credentials == credentials)
        var swapped = flags
        swapped["cluster-key"] = etcd.path("server.key")
        Self.expectRefused(swapped, saying: "check that cluster-key is the key of cluster-cert")
        var notPEM = flags
        notPEM["cluster-ca"] = credentials.passwordFile
        Self.expectRefused(notPEM, saying: "is not a PEM certificate")
        var missing = flags
        missing["cluster-password-file"] = etcd.path("no-such-file")
        Self.expectRefused(missing, saying: "cannot read the file of cluster-password-file")
        let empty = etcd.path("empty-password")
        try "\n".write(toFile: empty, atomically: true, encoding: .utf8)
        var blank = flags
        blank["cluster-password-file"] = empty
        Self.expectRefused(blank, saying: "is empty; put etcd's password for parley on its first line")
    }

    @Test(arguments: [
        (["cluster": "http://127.0.0.1:2379"], "cluster needs public-address"),
        (["public-address": "198.51.100.7:7800"], "add cluster"),
        (["region": "eu"], "add cluster"),
        (["cluster-user": "parley"], "add cluster"),
        (["cluster": "http://127.0.0.1:2379", "public-address": "0.0.0.0:7800"], "not a wildcard"),
        (["cluster": "http://127.0.0.1:2379", "public-address": "relay.example.org:7800"], "public IP address and port"),
        (["cluster": "ftp://127.0.0.1:2379", "public-address": "198.51.100.7:7800"], "e.g. https://10.0.0.2:2379"),
        (["cluster": "127.0.0.1:2379", "public-address": "198.51.100.7:7800"], "e.g. https://10.0.0.2:2379"),
        (["cluster": "http://127.0.0.1:2379", "public-address": "198.51.100.7:7800", "region": "eu west!"], "a region is"),
        (["cluster": "http://127.0.0.1:2379", "public-address": "198.51.100.7:7800", "cluster-ca": "/etc/ca.pem"], "write the cluster URL with https://"),
        (["cluster": "http://127.0.0.1:2379", "public-address": "198.51.100.7:7800", "cluster-user": "parley", "cluster-password-file": "/p"],
         "would send etcd's password in the clear"),
        (["cluster": "https://127.0.0.1:2379", "public-address": "198.51.100.7:7800", "cluster-cert": "/c.pem"], "cluster-cert and cluster-key go together"),
        (["cluster": "https://127.0.0.1:2379", "public-address": "198.51.100.7:7800", "cluster-user": "parley"], "cluster-user and cluster-password-file go together"),
        (["cluster": "https://127.0.0.1:2379", "public-address": "198.51.100.7:7800", "cluster-ca": "/no/such/ca.pem"], "cannot read the file of cluster-ca /no/such/ca.pem"),
    ])
    func badClusterSettingsSayWhatToFix(flags: [String: String], expected: String) {
        Self.expectRefused(flags, saying: expected)
    }

    static func expectRefused(_ flags: [String: String], saying expected: String, sourceLocation: SourceLocation = #_sourceLocation) {
        do throws(ConfigurationError) {
            _ = try resolve(flags)
            Issue.record("accepted \(flags)", sourceLocation: sourceLocation)
        } catch {
            #expect(error.message.contains(expected), "\(error.message)", sourceLocation: sourceLocation)
        }
    }

    @Test(arguments: StoreSecurity.allCases)
    func aMemberShowsItsRegistrationRoomsAndStoreLatencyOnMetrics(store: StoreSecurity) async throws {
        let etcd = try await EtcdServer.started(security: store)
        defer { etcd.stop() }
        var configuration = RelayConfiguration()
        configuration.listen = HostAndPort(host: "127.0.0.2", port: try freeUDPPort(host: "127.0.0.2"))
        configuration.threads = 1
        var logger = Logger(label: "cluster-metrics-test")
        logger.logLevel = .warning
        let metrics = RelayMetrics()
        let member = try ClusterMember(settings: ClusterSettings(endpoint: etcd.endpoint, credentials: etcd.credentials, publicAddress: configuration.listen),
                                       metrics: ClusterMetrics(registry: metrics.registry), logger: logger)
        let relay = try Relay.start(configuration: configuration, secret: .random(), relayKey: RelayKey(), placement: member, logger: logger, metrics: metrics)
        defer { relay.shutdown() }
        // Registered once the lease is granted, the record written and the watch running.
        let deadline = Date().addingTimeInterval(15)
        var text = try relay.metricsText()
        while !text.contains("parley_relay_cluster_registered 1"), Date() < deadline {
            try await Task.sleep(for: .milliseconds(50))
            text = try relay.metricsText()
        }
        #expect(text.contains("parley_relay_cluster_registered 1"))
        #expect(text.contains("parley_relay_cluster_rooms_hosted 0"))
        #expect(text.contains("parley_relay_trunks 0"), "trunks are counted once, by the trunks themselves")
        #expect(text.contains("parley_relay_cluster_store_request_seconds_count"))
        // Present; a request the store was slow to answer while the suite starts a dozen
        // stores at once counts here, and is retried, so its value is not asserted.
        #expect(text.contains("parley_relay_cluster_store_errors_total "))
        // Shutdown revokes the lease: the registration goes at once, not at its expiry.
        relay.shutdown()
        let client = try etcd.client()
        defer { client.close() }
        #expect(try await client.range(prefix: "/parley/relays/").entries.isEmpty)
    }

    /// The watch connection goes silent without closing (a NAT or firewall forgot it) while the
    /// lease keeps renewing on another: the relay notices that its own canary does not come
    /// back, reads the cluster again and watches anew, so a relay that joins meanwhile is
    /// seen within seconds, not never. (Plain HTTP only: the test's path tells the watch's
    /// connection from the others by its first request, which TLS hides.)
    @Test func aWatchThatWentSilentWithoutClosingIsNoticedAndStartedAgain() async throws {
        let etcd = try await EtcdServer.started()
        defer { etcd.stop() }
        let path = try FreezableStorePath(to: etcd.clientPort)
        defer { path.stop() }
        var configuration = RelayConfiguration()
        configuration.listen = HostAndPort(host: "127.0.0.2", port: try freeUDPPort(host: "127.0.0.2"))
        configuration.threads = 1
        var logger = Logger(label: "cluster-watch-test")
        logger.logLevel = .error
        let metrics = RelayMetrics()
        let cluster = try ClusterMember(settings: ClusterSettings(endpoint: try EtcdEndpoint(parsing: path.url), publicAddress: configuration.listen),
                                        metrics: ClusterMetrics(registry: metrics.registry), logger: logger)
        let relay = try Relay.start(configuration: configuration, secret: .random(), relayKey: RelayKey(), placement: cluster, logger: logger, metrics: metrics)
        defer { relay.shutdown() }
        let registered = Date().addingTimeInterval(15)
        while !cluster.isRegistered, Date() < registered { try await Task.sleep(for: .milliseconds(50)) }
        #expect(cluster.isRegistered)
        try await Task.sleep(for: .milliseconds(300))
        #expect(path.freezeWatches() == 1, "one watch connection to freeze")
        // Another relay registers, straight into the store.
        let store = try etcd.client()
        defer { store.close() }
        let newcomer = ClusterRelayRecord(address: "10.9.9.9:7800", key: "", load: 0, region: nil, lease: 0)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        try await store.put("/parley/relays/10.9.9.9:7800", value: Array(try encoder.encode(newcomer)))
        let started = Date()
        while !cluster.liveRelays.contains(where: { $0.address == "10.9.9.9:7800" }), Date().timeIntervalSince(started) < 30 {
            try await Task.sleep(for: .milliseconds(100))
        }
        let seenAfter = Date().timeIntervalSince(started)
        print(String(format: "a relay registered while the watch was silent was seen after %.1f s", seenAfter))
        #expect(cluster.liveRelays.contains { $0.address == "10.9.9.9:7800" }, "the frozen watch was never replaced")
        // At most 5 s of quiet, then up to 3 s for the canary, checked every half-second turn:
        // 6-9 s, with the rest of the cluster suite running beside it as well (its fixtures
        // block threads of their own, never the pool this relay's cluster tasks run on).
        #expect(seenAfter < 12)
    }
}
