import ArgumentParser
import CParleyNet
import Crypto
import Foundation
import Logging
import ParleyBasics
import ParleyClient
import ParleyCluster
import ParleyRelay
import ParleySecurity
import ParleyWire

#if canImport(Glibc)
import Glibc
#endif

/// What joining costs in a cluster: the join's latency against a relay on its own measured in
/// the same run, and the store operations each join takes (new room, or a room already placed),
/// the store's own background (lease renewals) measured over an idle stretch and taken off.
struct ClusterJoinBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cluster-join",
        abstract: "Join latency and store operations per join, cluster against a single relay (needs etcd: Scripts/bootstrap).")

    @Option(help: "Joins in each phase.")
    var joins = 200
    @Flag(help: "One line of JSON instead of the table.")
    var json = false

    struct Report: Encodable {
        var joins: Int
        var singleP50Milliseconds: Double, singleP99Milliseconds: Double
        var newRoomP50Milliseconds: Double, newRoomP99Milliseconds: Double
        var placedRoomP50Milliseconds: Double, placedRoomP99Milliseconds: Double
        var redirectedShare: Double
        var storeOperationsPerNewRoomJoin: Double
        var storeOperationsPerPlacedRoomJoin: Double
        var backgroundStoreOperationsPerRelaySecond: Double
    }

    func run() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/etcd") else {
            throw ValidationError("etcd is not installed; run Scripts/bootstrap (it installs etcd-server)")
        }
        let etcd = try BenchEtcd()
        defer { etcd.stop() }
        var logger = Logger(label: "cluster-bench")
        logger.logLevel = .error
        let secret = TokenSecret.random()
        func start(_ host: String, cluster: Bool) throws -> (Relay, RelayKey, ClusterMember?) {
            var configuration = RelayConfiguration()
            configuration.listen = HostAndPort(host: host, port: 0)
            configuration.threads = 1
            configuration.limits.maximumRooms = 10_000
            // Every member joins from 127.0.0.1: lift the per-source join budget, which exists
            // for strangers, not for what is measured here.
            configuration.limits.joinAttemptsPerSecondPerSource = 100_000
            configuration.limits.joinAttemptBurstPerSource = 100_000
            configuration.limits.cookieRepliesPerSecondPerSource = 100_000
            let key = RelayKey()
            var member: ClusterMember?
            let metrics = RelayMetrics()
            if cluster {
                // The public address needs the port, known once bound: bind a probe first.
                configuration.listen = HostAndPort(host: host, port: try udpPort(host))
                member = try ClusterMember(settings: ClusterSettings(endpoint: etcd.endpoint, publicAddress: configuration.listen),
                                           metrics: ClusterMetrics(registry: metrics.registry), logger: logger)
            }
            return (try Relay.start(configuration: configuration, secret: secret, relayKey: key, placement: member, logger: logger, metrics: metrics), key, member)
        }
        let single = try start("127.0.0.1", cluster: false)
        let members = try ["127.0.0.1", "127.0.0.2", "127.0.0.3"].map { try start($0, cluster: true) }
        defer {
            single.0.shutdown()
            for (relay, _, _) in members { relay.shutdown() }
        }
        let deadline = MonotonicClock.now() + 10_000_000_000
        while !members.allSatisfy({ $0.2?.isRegistered == true }), MonotonicClock.now() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        Thread.sleep(forTimeInterval: 0.6)  // every relay's view holds the other two
        func requests() -> Int { members.reduce(0) { $0 + ($1.2?.storeRequests ?? 0) } }
        func token(_ identity: String, _ room: String) -> String {
            let now = WallClock.seconds()
            return AccessToken(identity: identity, room: room, issuedAt: now, expiresAt: now + 3_600).signed(with: secret)
        }
        func address(_ relay: Relay) -> String { "\(relay.localAddress.ipAddress!):\(relay.localAddress.port!)" }

        // Idle: the store's background traffic (renewals) over a stretch as long as a phase.
        let idleStart = requests(), idleStarted = MonotonicClock.now()
        Thread.sleep(forTimeInterval: 2)
        let idleRate = Double(requests() - idleStart) / (Double(MonotonicClock.now() - idleStarted) / 1e9)

        var baseline: [Double] = []
        var clients: [BenchLinkClient] = []
        for index in 0..<joins {
            let client = BenchLinkClient(relay: address(single.0), key: single.1.publicKey, room: "single-\(index)", token: token("a\(index)", "single-\(index)"))
            baseline.append(client.joinMilliseconds())
            clients.append(client)
        }
        func phase(_ make: (Int) -> BenchLinkClient) -> (latencies: [Double], operations: Double, redirected: Int) {
            let before = requests(), started = MonotonicClock.now()
            var latencies: [Double] = [], redirected = 0
            for index in 0..<joins {
                let client = make(index)
                latencies.append(client.joinMilliseconds())
                if client.redirected { redirected += 1 }
                clients.append(client)
            }
            let seconds = Double(MonotonicClock.now() - started) / 1e9
            return (latencies, (Double(requests() - before) - idleRate * seconds) / Double(joins), redirected)
        }
        let entry = members[0]
        let newRooms = phase { index in
            BenchLinkClient(relay: address(entry.0), key: entry.1.publicKey, room: "room-\(index)", token: token("b\(index)", "room-\(index)"))
        }
        // A second member of each room, sent straight to the relay that hosts it.
        let hosts = Dictionary(uniqueKeysWithValues: members.map { (address($0.0), $0) })
        let placed = phase { index in
            let host = clients[joins + index].relayAddress
            let member = hosts[host] ?? entry
            return BenchLinkClient(relay: host, key: member.1.publicKey, room: "room-\(index)", token: token("c\(index)", "room-\(index)"))
        }
        let report = Report(
            joins: joins,
            singleP50Milliseconds: percentile(baseline, 0.5), singleP99Milliseconds: percentile(baseline, 0.99),
            newRoomP50Milliseconds: percentile(newRooms.latencies, 0.5), newRoomP99Milliseconds: percentile(newRooms.latencies, 0.99),
            placedRoomP50Milliseconds: percentile(placed.latencies, 0.5), placedRoomP99Milliseconds: percentile(placed.latencies, 0.99),
            redirectedShare: Double(newRooms.redirected) / Double(joins),
            storeOperationsPerNewRoomJoin: newRooms.operations, storeOperationsPerPlacedRoomJoin: placed.operations,
            backgroundStoreOperationsPerRelaySecond: idleRate / Double(members.count))
        if json { return try printJSON(report) }
        print(String(format: "joins per phase: %d (machine load %@)", joins, loadAverage()))
        print(String(format: "single relay, new room:   p50 %.2f ms  p99 %.2f ms", report.singleP50Milliseconds, report.singleP99Milliseconds))
        print(String(format: "cluster, new room:        p50 %.2f ms  p99 %.2f ms  (×%.2f the single relay's p50; %.0f %% redirected)",
                     report.newRoomP50Milliseconds, report.newRoomP99Milliseconds, report.newRoomP50Milliseconds / report.singleP50Milliseconds, report.redirectedShare * 100))
        print(String(format: "cluster, room on its relay: p50 %.2f ms  p99 %.2f ms  (×%.2f)",
                     report.placedRoomP50Milliseconds, report.placedRoomP99Milliseconds, report.placedRoomP50Milliseconds / report.singleP50Milliseconds))
        print(String(format: "store operations per join: new room %.2f, placed room %.2f; background %.2f per relay per second",
                     report.storeOperationsPerNewRoomJoin, report.storeOperationsPerPlacedRoomJoin, report.backgroundStoreOperationsPerRelaySecond))
    }

    private func percentile(_ values: [Double], _ fraction: Double) -> Double {
        let sorted = values.sorted()
        return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * fraction))]
    }

    private func loadAverage() -> String {
        ((try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8)) ?? "?").split(separator: " ").prefix(3).joined(separator: " ")
    }
}

/// A UDP port free on `host` now.
private func udpPort(_ host: String) throws -> Int {
    let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
    defer { close(descriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr(host)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) } }
    guard bound == 0 else { throw ValidationError("cannot bind a UDP port on \(host)") }
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// One member joining through the client's `RelayLink` over a UDP socket, following redirects.
final class BenchLinkClient {
    private let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
    private var link: RelayLink
    private(set) var redirected = false
    var relayAddress: String { link.relayAddress }

    init(relay: String, key: Curve25519.KeyAgreement.PublicKey, room: String, token: String) {
        link = RelayLink(configuration: RelayLink.Configuration(relayAddress: relay, room: room, token: token, ssrc: UInt32.random(in: 1...UInt32.max),
                                                                security: .secure(relayKey: key)))
    }

    deinit { close(descriptor) }

    /// Joins (hello to first roster) and returns how long it took, in milliseconds.
    func joinMilliseconds() -> Double {
        let started = MonotonicClock.now()
        take(link.start(now: started))
        while link.phase != .active, MonotonicClock.now() - started < 5_000_000_000 {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 2) > 0 {
                var buffer = [UInt8](repeating: 0, count: 2048)
                let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
                if count > 0 { take(buffer.withUnsafeBytes { link.handle(datagram: UnsafeRawBufferPointer(rebasing: $0[..<count]), now: MonotonicClock.now()) { _ in } }) }
            }
            take(link.tick(now: MonotonicClock.now()))
        }
        return Double(MonotonicClock.now() - started) / 1e6
    }

    private func take(_ output: RelayLink.Output) {
        if output.events.contains(where: { if case .redirected = $0 { true } else { false } }) { redirected = true }
        let text = link.relayAddress
        guard let parts = try? HostPortText(parsing: text), let port = parts.port else { return }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr(String(parts.host))
        address.sin_port = UInt16(port).bigEndian
        for datagram in output.datagrams {
            _ = datagram.withUnsafeBytes { raw in
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(descriptor, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
            }
        }
    }
}

/// etcd for the benchmark, on free ports in a temporary folder.
final class BenchEtcd {
    let process = Process()
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-bench-etcd-\(UUID().uuidString)").path
    let endpoint: EtcdEndpoint

    init() throws {
        let client = try tcpPort(), peer = try tcpPort()
        endpoint = EtcdEndpoint(host: "127.0.0.1", port: client)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/etcd")
        process.arguments = ["--data-dir", directory + "/data", "--listen-client-urls", "http://127.0.0.1:\(client)",
                             "--advertise-client-urls", "http://127.0.0.1:\(client)", "--listen-peer-urls", "http://127.0.0.1:\(peer)",
                             "--initial-advertise-peer-urls", "http://127.0.0.1:\(peer)", "--initial-cluster", "default=http://127.0.0.1:\(peer)"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        Thread.sleep(forTimeInterval: 1.5)
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

private func tcpPort() throws -> Int {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(descriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    guard withUnsafePointer(to: &address, { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) } }) == 0 else {
        throw ValidationError("cannot bind a TCP port on 127.0.0.1")
    }
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
    return Int(UInt16(bigEndian: address.sin_port))
}
