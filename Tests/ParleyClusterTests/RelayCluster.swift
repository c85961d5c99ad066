import Foundation
import ParleyAdmin
import ParleyBasics
import ParleyCluster
import ParleyRelay
import ParleySecurity
import ParleyWire
import Synchronization

/// A cluster as it runs in production, on one machine: a real etcd on 127.0.0.1 and relays
/// as child processes (`parley-relay serve --cluster …`), relay N on 127.0.0.N, each with a
/// key of its own and the token secret they share. A test can SIGKILL any of them. The store
/// is plain, or reached over TLS with a client certificate and an etcd user (``StoreSecurity``).
final class RelayCluster: @unchecked Sendable {
    // @unchecked: `relays` changes only through kill/start, which the test calls in turn.
    let etcd: EtcdServer
    let store: EtcdClient
    let secret = TokenSecret.random()
    let directory: String
    private(set) var relays: [Member] = []

    struct Member {
        let index: Int
        let address: String
        let key: RelayKey
        let adminPort: Int
        let process: Process
        var log: String
    }

    static var relayBinary: URL {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("parley-relay")
    }

    /// The region each relay is started with (`--region`), by index from 1; none if absent.
    let regions: [Int: String]

    /// Starts the store and `count` relays, and waits until all are registered, on a thread
    /// of its own (``onThread(_:)``: starting them blocks for seconds).
    static func started(relays count: Int = 3, regions: [Int: String] = [:], security: StoreSecurity = .plain) async throws -> RelayCluster {
        try await onThread { try RelayCluster(relays: count, regions: regions, security: security) }
    }

    private init(relays count: Int, regions: [Int: String], security: StoreSecurity) throws {
        self.regions = regions
        guard FileManager.default.isExecutableFile(atPath: Self.relayBinary.path) else {
            throw EtcdServer.Missing(description: "\(Self.relayBinary.path) is missing; build it first: swift build --build-tests")
        }
        etcd = try EtcdServer(security: security)
        store = try etcd.client()
        directory = etcd.directory
        for index in 1...count { try startRelay(index) }
        try waitForRegistrations(count, within: 10)
    }

    /// Starts relay `index` on 127.0.0.`index`, on a fresh port.
    func startRelay(_ index: Int) throws {
        let host = "127.0.0.\(index)"
        let port = try freeUDPPort(host: host)
        let key = RelayKey()
        let secretPath = directory + "/relay-\(index).secret"
        try? FileManager.default.removeItem(atPath: secretPath)
        try SecretFile(tokenSecret: secret, relayKey: key).write(path: secretPath, overwrite: true)
        let adminPort = try freeTCPPort()
        let log = directory + "/relay-\(index)-\(port).log"
        FileManager.default.createFile(atPath: log, contents: nil)
        let process = Process()
        process.executableURL = Self.relayBinary
        process.arguments = [
            "serve", "--listen", "\(host):\(port)", "--admin", "127.0.0.1:\(adminPort)", "--secret-file", secretPath,
            "--threads", "1", "--log-level", "info", "--public-address", "\(host):\(port)",
        ] + etcd.relayFlags + (regions[index].map { ["--region", $0] } ?? [])
        process.environment = ["PATH": "/usr/bin:/bin"]
        let handle = FileHandle(forWritingAtPath: log)
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        ChildProcesses.started(process)
        let member = Member(index: index, address: "\(host):\(port)", key: key, adminPort: adminPort, process: process, log: log)
        relays.removeAll { $0.index == index }
        relays.append(member)
        relays.sort { $0.index < $1.index }
    }

    func relay(_ index: Int) -> Member { relays.first { $0.index == index }! }

    func relay(at address: String) -> Member? { relays.first { $0.address == address } }

    /// Waits until `count` relays are registered in the store.
    func registrations(_ count: Int, within seconds: Double = 10) async throws {
        try await onThread { try self.waitForRegistrations(count, within: seconds) }
    }

    /// ``registrations(_:within:)`` from a plain thread.
    private func waitForRegistrations(_ count: Int, within seconds: Double) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if (try? blocking { try await self.store.range(prefix: "/parley/relays/").entries.count }) == count { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        let logs = relays.map { "relay \($0.index): " + ((try? String(contentsOfFile: $0.log, encoding: .utf8)) ?? "").suffix(400) }
        throw EtcdServer.Missing(description: "\(count) relays did not register within \(seconds) s; \(logs.joined(separator: "\n"))")
    }

    /// The relay the store places `room` on, if any.
    func placement(of room: String) async throws -> String? {
        guard let entry = try await store.get("/parley/rooms/\(room)") else { return nil }
        struct Placement: Decodable { var relay: String }
        return try? JSONDecoder().decode(Placement.self, from: Data(entry.value)).relay
    }

    /// SIGKILL: the relay vanishes with no goodbye and no word to the store.
    func kill(_ member: Member) {
        Foundation.kill(member.process.processIdentifier, SIGKILL)
        member.process.waitUntilExit()
    }

    func token(_ identity: String, room: String, region: String? = nil) -> String {
        let now = WallClock.seconds()
        return AccessToken(identity: identity, room: room, issuedAt: now, expiresAt: now + 3_600, region: region).signed(with: secret)
    }

    /// The relays the store records as having members of `room`.
    func presence(in room: String) async throws -> Set<String> {
        let prefix = "/parley/present/\(room)/"
        return Set(try await store.range(prefix: prefix).entries.map { String($0.key.dropFirst(prefix.count)) })
    }

    /// One figure from a relay's /metrics (summed over its label sets, or those containing
    /// `labels`), nil if absent. Read after the call, so the relays still run.
    func metric(_ name: String, of member: Member, labels: String? = nil) -> Double? {
        guard let answer = try? AdminClient.send(method: "GET", path: "/metrics", token: nil, to: HostAndPort(host: "127.0.0.1", port: member.adminPort)),
              answer.status == 200 else { return nil }
        let text = String(decoding: answer.body, as: UTF8.self)
        let values = text.split(separator: "\n").filter { $0.hasPrefix(name + " ") || $0.hasPrefix(name + "{") }
            .filter { line in labels.map { line.contains($0) } ?? true }
            .compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }
        return values.isEmpty ? nil : values.reduce(0, +)
    }

    func log(of member: Member) -> String { (try? String(contentsOfFile: member.log, encoding: .utf8)) ?? "" }

    /// Asks every relay to stop (SIGTERM, so each revokes its lease as in production), then,
    /// on a thread of its own so the caller's pool thread is not held while they shut down,
    /// waits for them and stops the store. Once; `deinit` calls it too.
    func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        let processes = relays.map { SendableProcess(process: $0.process) }
        for process in processes where process.process.isRunning { process.process.terminate() }
        let store = store, etcd = etcd
        Thread.detachNewThread {
            for process in processes { process.process.waitUntilExit() }
            store.close()
            etcd.stop()
        }
    }

    private let stopped = Atomic(false)

    deinit { stop() }
}
