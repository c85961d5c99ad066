import Foundation
import NIOPosix
import ParleyCluster
import ParleyRelay
import Synchronization
import Testing

/// The store client against a real etcd, plain and behind TLS with a client certificate and
/// a user: what the cluster relies on it for.
@Suite("etcd client", .serialized)
struct EtcdClientTests {
    @Test(arguments: StoreSecurity.allCases)
    func aKeyPutIsReadBackByPrefixWithTheRevisionItWasReadAt(store: StoreSecurity) async throws {
        let etcd = try await EtcdServer.started(security: store)
        let client = try etcd.client()
        defer { client.close() }
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
    @Test(arguments: StoreSecurity.allCases)
    func ofManyConcurrentCreatesExactlyOneWinsAndTheOthersReadItsValue(store: StoreSecurity) async throws {
        let etcd = try await EtcdServer.started(security: store)
        let client = try etcd.client()
        defer { client.close() }
        let outcomes = await withTaskGroup(of: (Int, EtcdClient.CreateOutcome?).self) { group in
            for index in 0..<10 {
                group.addTask {
                    do {
                        return (index, try await client.create("/parley/rooms/standup", value: Array("relay-\(index)".utf8), lease: nil))
                    } catch {
                        Issue.record("claim \(index): \(error)")
                        return (index, nil)
                    }
                }
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

    @Test(arguments: StoreSecurity.allCases)
    func aKeyUnderALeaseVanishesWhenTheLeaseIsNotKeptAlive(store: StoreSecurity) async throws {
        let etcd = try await EtcdServer.started(security: store)
        let client = try etcd.client()
        defer { client.close() }
        // 5 s, so the renewal below still finds it while the suite starts a dozen stores at
        // once (CI saw grant-to-renewal take over 3 s then).
        let lease = try await client.grantLease(ttlSeconds: 5)
        #expect(try await client.create("/parley/rooms/brief", value: [1], lease: lease) == .created)
        #expect(try await client.keepAlive(lease: lease) == 5)
        #expect(try await client.get("/parley/rooms/brief")?.lease == lease)
        // etcd checks expiries every half second: gone within TTL + 1 s alone, later when the
        // suite's other stores keep the machine busy; a lease kept alive would never go.
        let deadline = Date().addingTimeInterval(15)
        while try await client.get("/parley/rooms/brief") != nil, Date() < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(try await client.get("/parley/rooms/brief") == nil)
        await #expect(throws: EtcdError.leaseNotFound) { try await client.keepAlive(lease: lease) }
        await #expect(throws: EtcdError.leaseNotFound) { try await client.put("/parley/x", value: [1], lease: lease) }
    }

    @Test(arguments: StoreSecurity.allCases)
    func aConditionalDeleteRemovesOnlyTheValueItNames(store: StoreSecurity) async throws {
        let etcd = try await EtcdServer.started(security: store)
        let client = try etcd.client()
        defer { client.close() }
        try await client.put("/parley/rooms/r", value: Array("mine".utf8))
        #expect(try await client.delete("/parley/rooms/r", ifValue: Array("theirs".utf8)) == false)
        #expect(try await client.get("/parley/rooms/r") != nil)
        #expect(try await client.delete("/parley/rooms/r", ifValue: Array("mine".utf8)) == true)
        #expect(try await client.get("/parley/rooms/r") == nil)
    }

    @Test(arguments: StoreSecurity.allCases)
    func aWatchDeliversPutsAndDeletesInOrderFromTheRevisionAfterARead(store: StoreSecurity) async throws {
        let etcd = try await EtcdServer.started(security: store)
        let client = try etcd.client()
        defer { client.close() }
        try await client.put("/parley/rooms/before", value: [0])
        let (revision, _) = try await client.range(prefix: "/parley/")
        let seen = Mutex<[EtcdChange]>([])
        let watch = try await client.watch(prefix: "/parley/", fromRevision: revision + 1, onChanges: { changes, _ in seen.withLock { $0 += changes } }, onEnd: { _ in })
        defer { watch.cancel() }
        try await client.put("/parley/rooms/a", value: [1])
        if store == .plain { try await client.put("/elsewhere/b", value: [2]) }  // the TLS store's user may write /parley/ only
        _ = try await client.delete("/parley/rooms/a", ifValue: [1])
        let deadline = Date().addingTimeInterval(3)
        while seen.withLock({ $0.count }) < 2, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        let changes = seen.withLock { $0 }
        #expect(changes.count == 2)
        guard changes.count == 2 else { return }
        if case let .put(entry) = changes[0] { #expect(entry.key == "/parley/rooms/a" && entry.value == [1]) } else { Issue.record("first change \(changes[0])") }
        #expect(changes[1] == .delete(key: "/parley/rooms/a"))
    }

    /// A watch whose store goes away says so once, so the cluster reads afresh and watches
    /// again; one its owner cancels says nothing.
    @Test func aWatchEndsOnceWhenTheStoreGoesAndSilentlyWhenCancelled() async throws {
        let etcd = try await EtcdServer.started()
        let client = try etcd.client()
        defer { client.close() }
        let ends = Mutex<[String]>([])
        let cancelled = try await client.watch(prefix: "/parley/", fromRevision: 1, onChanges: { _, _ in }, onEnd: { error in ends.withLock { $0.append("cancelled: \(error)") } })
        cancelled.cancel()
        let watch = try await client.watch(prefix: "/parley/", fromRevision: 1, onChanges: { _, _ in }, onEnd: { error in ends.withLock { $0.append("\(error)") } })
        defer { watch.cancel() }
        etcd.kill()
        let deadline = Date().addingTimeInterval(3)
        while ends.withLock({ $0.isEmpty }), Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        try await Task.sleep(for: .milliseconds(200))
        #expect(ends.withLock { $0 } == [EtcdError.connectionClosed.description])
    }

    @Test(arguments: StoreSecurity.allCases)
    func aStoreThatDiesFailsRequestsQuicklyAndTheClientReconnectsWhenItReturns(store: StoreSecurity) async throws {
        let etcd = try await EtcdServer.started(security: store)
        let client = try etcd.client()
        defer { client.close() }
        try await client.put("/parley/k", value: [1])
        etcd.kill()
        let started = Date()
        await #expect(throws: (any Error).self) { try await client.get("/parley/k") }
        #expect(Date().timeIntervalSince(started) < 1.5)
        try await etcd.restarted()
        #expect(try await client.get("/parley/k")?.value == [1])
    }

    // MARK: What a person is told

    /// The relay's user and password refused, no user given to a store that asks for one,
    /// a user whose role does not reach `/parley/`, a store whose CA is not the one named:
    /// each is said as what to fix, not as an HTTP status.
    @Test func aStoreThatRefusesTheRelaySaysWhatToFix() async throws {
        let etcd = try await EtcdServer.started(security: .tlsAndAuthentication)
        func attempt(_ credentials: EtcdCredentials) async -> String {
            do {
                let client = try EtcdClient(endpoint: etcd.endpoint, credentials: credentials, group: MultiThreadedEventLoopGroup.singleton)
                defer { client.close() }
                try await client.put("/parley/k", value: [1])
                return "accepted"
            } catch {
                return "\(error)"
            }
        }
        var wrongPassword = etcd.credentials
        let passwordFile = etcd.path("wrong-password")
        try "not-the-password\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
        wrongPassword.passwordFile = passwordFile
        #expect(await attempt(wrongPassword).contains("etcd refused the user parley and its password (cluster-user, cluster-password-file)"))
        var noUser = etcd.credentials
        noUser.user = nil
        noUser.passwordFile = nil
        let anonymous = await attempt(noUser)
        #expect(anonymous.contains("give the relay one with cluster-user and cluster-password-file"), "\(anonymous)")
        try await etcd.etcdctlOffThePool(["user", "add", "outsider:outsider-password"])
        var outsider = etcd.credentials
        outsider.user = "outsider"
        let outsiderPassword = etcd.path("outsider-password")
        try "outsider-password\n".write(toFile: outsiderPassword, atomically: true, encoding: .utf8)
        outsider.passwordFile = outsiderPassword
        #expect(await attempt(outsider).contains("give its role readwrite on the prefix /parley/"))
        var otherCA = etcd.credentials
        otherCA.certificateAuthorityFile = etcd.path("client.pem")  // a certificate, but not etcd's CA
        #expect(await attempt(otherCA).contains("cannot reach etcd"))
        #expect(await attempt(etcd.credentials) == "accepted")
    }

    @Test func endpointsAreValidatedWithAMessageSayingWhatToWrite() throws {
        #expect(try EtcdEndpoint(parsing: "http://127.0.0.1:2379") == EtcdEndpoint(host: "127.0.0.1", port: 2379))
        #expect(try EtcdEndpoint(parsing: "http://10.0.0.5") == EtcdEndpoint(host: "10.0.0.5", port: 2379))
        #expect(try EtcdEndpoint(parsing: "https://etcd.example.org:2379/") == EtcdEndpoint(host: "etcd.example.org", port: 2379, usesTLS: true))
        #expect(try EtcdEndpoint(parsing: "https://[2001:db8::1]:2379").description == "https://[2001:db8::1]:2379")
        for bad in ["127.0.0.1:2379", "http://127.0.0.1:2379/v3", "http://:x", "etcd", "https://user@etcd:2379", "http://bad_host:2379", "http://2001:db8::1:2379"] {
            #expect(throws: ConfigurationError.self, "\(bad)") { try EtcdEndpoint(parsing: bad) }
        }
    }
}
