import Foundation
import NIOPosix
import ParleyRelay
import Synchronization
import Testing

/// The store client against a real etcd: what the cluster relies on it for.
@Suite("etcd client", .serialized)
struct EtcdClientTests {
    let etcd: EtcdServer
    let client: EtcdClient

    init() throws {
        etcd = try EtcdServer()
        client = EtcdClient(endpoint: etcd.endpoint, group: MultiThreadedEventLoopGroup.singleton)
    }

    @Test func aKeyPutIsReadBackByPrefixWithTheRevisionItWasReadAt() async throws {
        try await client.put("/parley/relays/a", value: Array("one".utf8))
        try await client.put("/parley/relays/b", value: Array("two".utf8))
        try await client.put("/parley/rooms/x", value: Array("elsewhere".utf8))
        let (revision, entries) = try await client.range(prefix: "/parley/relays/")
        #expect(entries.map(\.key) == ["/parley/relays/a", "/parley/relays/b"])
        #expect(entries.map { String(decoding: $0.value, as: UTF8.self) } == ["one", "two"])
        #expect(revision >= 4)
        #expect(try await client.get("/parley/rooms/x")?.value == Array("elsewhere".utf8))
        #expect(try await client.get("/parley/rooms/none") == nil)
    }

    /// Ten claims of one room at once, as relays racing for its first member: one wins, and
    /// every other learns the winner's value in the same answer.
    @Test func ofManyConcurrentCreatesExactlyOneWinsAndTheOthersReadItsValue() async throws {
        let outcomes = await withTaskGroup(of: (Int, EtcdClient.CreateOutcome?).self) { group in
            for index in 0..<10 {
                group.addTask { (index, try? await client.create("/parley/rooms/standup", value: Array("relay-\(index)".utf8), lease: nil)) }
            }
            var all: [(Int, EtcdClient.CreateOutcome?)] = []
            for await outcome in group { all.append(outcome) }
            return all
        }
        let winners = outcomes.filter { $0.1 == .created }.map(\.0)
        #expect(winners.count == 1)
        let stored = try #require(try await client.get("/parley/rooms/standup"))
        #expect(stored.value == Array("relay-\(winners.first ?? -1)".utf8))
        for (_, outcome) in outcomes where outcome != .created {
            #expect(outcome == .exists(stored))
        }
    }

    @Test func aKeyUnderALeaseVanishesWhenTheLeaseIsNotKeptAlive() async throws {
        // 3 s, so a machine busy with other builds still renews it in time once.
        let lease = try await client.grantLease(ttlSeconds: 3)
        #expect(try await client.create("/parley/rooms/brief", value: [1], lease: lease) == .created)
        #expect(try await client.keepAlive(lease: lease) == 3)
        #expect(try await client.get("/parley/rooms/brief")?.lease == lease)
        // etcd checks expiries every half second: gone within TTL + 1 s.
        let deadline = Date().addingTimeInterval(5)
        while try await client.get("/parley/rooms/brief") != nil, Date() < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(try await client.get("/parley/rooms/brief") == nil)
        await #expect(throws: EtcdError.leaseNotFound) { try await client.keepAlive(lease: lease) }
        await #expect(throws: EtcdError.leaseNotFound) { try await client.put("/parley/x", value: [1], lease: lease) }
    }

    @Test func aConditionalDeleteRemovesOnlyTheValueItNames() async throws {
        try await client.put("/parley/rooms/r", value: Array("mine".utf8))
        #expect(try await client.delete("/parley/rooms/r", ifValue: Array("theirs".utf8)) == false)
        #expect(try await client.get("/parley/rooms/r") != nil)
        #expect(try await client.delete("/parley/rooms/r", ifValue: Array("mine".utf8)) == true)
        #expect(try await client.get("/parley/rooms/r") == nil)
    }

    @Test func aWatchDeliversPutsAndDeletesInOrderFromTheRevisionAfterARead() async throws {
        try await client.put("/parley/rooms/before", value: [0])
        let (revision, _) = try await client.range(prefix: "/parley/")
        let seen = Mutex<[EtcdChange]>([])
        let watch = try await EtcdWatch.start(
            endpoint: etcd.endpoint, prefix: "/parley/", fromRevision: revision + 1, on: MultiThreadedEventLoopGroup.singleton.next(),
            onChanges: { changes, _ in seen.withLock { $0 += changes } }, onEnd: { _ in }).get()
        defer { watch.cancel() }
        try await client.put("/parley/rooms/a", value: [1])
        try await client.put("/elsewhere/b", value: [2])
        _ = try await client.delete("/parley/rooms/a", ifValue: [1])
        let deadline = Date().addingTimeInterval(3)
        while seen.withLock({ $0.count }) < 2, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        let changes = seen.withLock { $0 }
        #expect(changes.count == 2)
        guard changes.count == 2 else { return }
        if case let .put(entry) = changes[0] { #expect(entry.key == "/parley/rooms/a" && entry.value == [1]) } else { Issue.record("first change \(changes[0])") }
        #expect(changes[1] == .delete(key: "/parley/rooms/a"))
    }

    @Test func aStoreThatDiesFailsRequestsQuicklyAndTheClientReconnectsWhenItReturns() async throws {
        try await client.put("/parley/k", value: [1])
        etcd.kill()
        let started = Date()
        await #expect(throws: (any Error).self) { try await client.get("/parley/k") }
        #expect(Date().timeIntervalSince(started) < 1.5)
        try etcd.start()
        #expect(try await client.get("/parley/k")?.value == [1])
    }

    @Test func endpointsAreValidatedWithAMessageSayingWhatToWrite() throws {
        #expect(try EtcdEndpoint(parsing: "http://127.0.0.1:2379") == EtcdEndpoint(host: "127.0.0.1", port: 2379))
        #expect(try EtcdEndpoint(parsing: "http://10.0.0.5") == EtcdEndpoint(host: "10.0.0.5", port: 2379))
        for bad in ["127.0.0.1:2379", "https://127.0.0.1:2379", "http://127.0.0.1:2379/v3", "http://:x", "etcd"] {
            #expect(throws: ConfigurationError.self) { try EtcdEndpoint(parsing: bad) }
        }
    }
}
