import Foundation
import Logging
import ParleyRelay
import ParleySecurity
import Testing

/// `--cluster`, `--public-address` and `--region`: checked with messages a person can act
/// on, and what a member shows on /metrics.
@Suite("Cluster settings and metrics")
struct ClusterConfigurationTests {
    static func resolve(_ flags: [String: String]) throws(ConfigurationError) -> RelayConfiguration {
        try RelayConfiguration.resolve(flags: flags, environment: [:], file: nil)
    }

    @Test func aMemberNamesTheStoreAndWhereClientsReachIt() throws {
        let configuration = try Self.resolve(["cluster": "http://127.0.0.1:2379", "public-address": "198.51.100.7:7800", "region": "eu-west"])
        #expect(configuration.cluster == ClusterSettings(endpoint: EtcdEndpoint(host: "127.0.0.1", port: 2379),
                                                         publicAddress: HostAndPort(host: "198.51.100.7", port: 7800), region: "eu-west"))
        #expect(try Self.resolve([:]).cluster == nil, "no --cluster: a relay on its own")
    }

    @Test(arguments: [
        (["cluster": "http://127.0.0.1:2379"], "cluster needs public-address"),
        (["public-address": "198.51.100.7:7800"], "add cluster"),
        (["region": "eu"], "add cluster"),
        (["cluster": "http://127.0.0.1:2379", "public-address": "0.0.0.0:7800"], "not a wildcard"),
        (["cluster": "http://127.0.0.1:2379", "public-address": "relay.example.org:7800"], "public IP address and port"),
        (["cluster": "https://127.0.0.1:2379", "public-address": "198.51.100.7:7800"], "plain HTTP"),
        (["cluster": "127.0.0.1:2379", "public-address": "198.51.100.7:7800"], "http://127.0.0.1:2379"),
        (["cluster": "http://127.0.0.1:2379", "public-address": "198.51.100.7:7800", "region": "eu west!"], "a region is"),
    ])
    func badClusterSettingsSayWhatToFix(flags: [String: String], expected: String) {
        do throws(ConfigurationError) {
            _ = try Self.resolve(flags)
            Issue.record("accepted \(flags)")
        } catch {
            #expect(error.message.contains(expected), "\(error.message)")
        }
    }

    @Test func aMemberShowsItsRegistrationRoomsAndStoreLatencyOnMetrics() async throws {
        let etcd = try EtcdServer()
        defer { etcd.stop() }
        var configuration = RelayConfiguration()
        configuration.listen = HostAndPort(host: "127.0.0.2", port: try freeUDPPort(host: "127.0.0.2"))
        configuration.admin = nil
        configuration.threads = 1
        configuration.cluster = ClusterSettings(endpoint: etcd.endpoint, publicAddress: configuration.listen)
        var logger = Logger(label: "cluster-metrics-test")
        logger.logLevel = .error
        let relay = try Relay.start(configuration: configuration, secret: .random(), relayKey: RelayKey(), logger: logger)
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
        #expect(text.contains("parley_relay_cluster_store_errors_total 0"))
        // Shutdown revokes the lease: the registration goes at once, not at its expiry.
        relay.shutdown()
        let store = EtcdClient(endpoint: etcd.endpoint, group: .singletonMultiThreadedEventLoopGroup)
        defer { store.close() }
        #expect(try await store.range(prefix: "/parley/relays/").entries.isEmpty)
    }

    /// The watch connection goes silent without closing (a NAT or firewall forgot it) while the
    /// lease keeps renewing on another: the relay notices that its own canary does not come
    /// back, reads the cluster again and watches anew, so a relay that joins meanwhile is
    /// seen within seconds, not never.
    @Test func aWatchThatWentSilentWithoutClosingIsNoticedAndStartedAgain() async throws {
        let etcd = try EtcdServer()
        defer { etcd.stop() }
        let path = try FreezableStorePath(to: etcd.clientPort)
        defer { path.stop() }
        var configuration = RelayConfiguration()
        configuration.listen = HostAndPort(host: "127.0.0.2", port: try freeUDPPort(host: "127.0.0.2"))
        configuration.admin = nil
        configuration.threads = 1
        configuration.cluster = ClusterSettings(endpoint: try EtcdEndpoint(parsing: path.url), publicAddress: configuration.listen)
        var logger = Logger(label: "cluster-watch-test")
        logger.logLevel = .error
        let relay = try Relay.start(configuration: configuration, secret: .random(), relayKey: RelayKey(), logger: logger)
        defer { relay.shutdown() }
        let cluster = try #require(relay.cluster)
        let registered = Date().addingTimeInterval(15)
        while !cluster.isRegistered, Date() < registered { try await Task.sleep(for: .milliseconds(50)) }
        #expect(cluster.isRegistered)
        try await Task.sleep(for: .milliseconds(300))
        #expect(path.freezeWatches() == 1, "one watch connection to freeze")
        // Another relay registers, straight into the store.
        let store = EtcdClient(endpoint: etcd.endpoint, group: .singletonMultiThreadedEventLoopGroup)
        defer { store.close() }
        let newcomer = ClusterRelayRecord(address: "10.9.9.9:7800", key: "", load: 0, region: nil, lease: 0)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        try await store.put("/parley/relays/10.9.9.9:7800", value: Array(try encoder.encode(newcomer)))
        let started = Date()
        while !cluster.liveRelays.contains(where: { $0.address == "10.9.9.9:7800" }), Date().timeIntervalSince(started) < 15 {
            try await Task.sleep(for: .milliseconds(100))
        }
        let seenAfter = Date().timeIntervalSince(started)
        print(String(format: "a relay registered while the watch was silent was seen after %.1f s", seenAfter))
        #expect(cluster.liveRelays.contains { $0.address == "10.9.9.9:7800" }, "the frozen watch was never replaced")
        // 5 s quiet, then 3 s for the canary, checked every half-second turn: about 9 s.
        #expect(seenAfter < 12)
    }
}
