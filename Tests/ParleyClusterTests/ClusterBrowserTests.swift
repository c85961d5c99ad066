import Foundation
import Logging
import ParleyBasics
import ParleyCluster
import ParleyRelay
import ParleyRelayTestSupport
import ParleySecurity
import ParleyWebRTC
import ParleyWire
import Synchronization
import Testing

/// A browser is a member like any other in a cluster too: it joins the relay whose page it
/// opened (it cannot follow a redirect), and that relay joins the room over a trunk.
struct ClusterBrowserTests {
    /// Bob's `parley` client is in the room on its relay; Ada's browser opens the other relay's
    /// page, and that relay joins the room over a trunk: each is in the other's roster, and each hears the
    /// other's packets, every one of them.
    @Test func aBrowserOnAnotherRelayThanItsRoomJoinsItOverATrunk() async throws {
        let etcd = try await EtcdServer.started()
        defer { etcd.stop() }
        // The sockets are driven on a thread of their own; what they saw is asserted here.
        let seen = try await onThread { try Self.browserAcrossATrunk(store: etcd.endpoint) }
        #expect(seen.relaysSawEachOther, "the two relays never saw each other, or the room was never placed")
        #expect(seen.bobJoined, "bob could not join on relay 1: \(seen.bobPhase)")
        #expect(seen.bobsRoster == ["ada", "bob"], "the browser on relay 2 never reached bob's roster on relay 1")
        #expect(seen.pagesRoster == ["ada", "bob"], "bob never reached the page's roster")
        #expect(seen.heardByBob == Set(1...50), "bob heard \(seen.heardByBob.count) of the browser's 50 packets")
        #expect(seen.heardByBrowser == Set(1...50), "the browser heard \(seen.heardByBrowser.count) of bob's 50 packets")
    }

    /// Relays run `--insecure` have no keys, so they cannot trunk: a browser opening the page
    /// of a relay other than its room's is refused at once, with the room's relay named,
    /// rather than admitted into a second, silent copy of the room.
    @Test func aBrowserOnARelayThatCannotTrunkToItsRoomIsToldWhere() async throws {
        let etcd = try await EtcdServer.started()
        defer { etcd.stop() }
        let refusal = try await onThread { () throws -> String in
            let cluster = try TwoRelays(store: etcd.endpoint, secure: false)
            defer { cluster.stop() }
            guard cluster.sawEachOther, cluster.roomPlaced else { return "the two relays never saw each other, or the room was never placed" }
            let offer = StandInBrowser.offer(fingerprint: try DTLSContext().fingerprint)
            switch cluster.other.relay.acceptBrowserOffer(offer, token: cluster.token("ada"), candidateHost: cluster.other.host) {
            case .success: return "answered"
            case let .failure(refusal): return "\(refusal.status) \(refusal.message)"
            }
        }
        #expect(refusal.hasPrefix("503 mixed is hosted on another relay of the cluster (127.0.0."), "\(refusal)")
        #expect(refusal.contains("open the page of that relay"), "\(refusal)")
    }

    struct Seen: Sendable {
        var relaysSawEachOther = false
        var bobJoined = false
        var bobPhase = ""
        var bobsRoster: Set<String> = []
        var pagesRoster: Set<String> = []
        var heardByBob: Set<UInt16> = []
        var heardByBrowser: Set<UInt16> = []
    }

    private static func browserAcrossATrunk(store: EtcdEndpoint) throws -> Seen {
        var seen = Seen()
        let cluster = try TwoRelays(store: store, secure: true)
        let (home, other) = (cluster.home, cluster.other)
        defer { cluster.stop() }
        let token = cluster.token
        seen.relaysSawEachOther = cluster.sawEachOther && cluster.roomPlaced
        let bob = SecureMember(relayPort: home.port, relayHost: home.host, room: "mixed", token: token("bob"), relayKey: home.key?.publicKey)
        seen.bobJoined = bob.pump(timeout: 10) { $0.isActive }
        seen.bobPhase = "\(bob.link.phase)"
        guard seen.bobJoined else { return seen }
        let ada = try StandInBrowser.connect(to: other.relay, port: other.port, host: other.host, token: token("ada"), ssrc: 2222)

        // Each in the other's roster: bob's from relay 1, the page's from relay 2.
        let latestRoster = { (member: SecureMember) -> Set<String> in
            for event in member.events.reversed() { if case let .roster(entries) = event { return Set(entries.map(\.identity)) } }
            return []
        }
        bob.pump(timeout: 10) { latestRoster($0) == ["ada", "bob"] }
        seen.bobsRoster = latestRoster(bob)
        let pageRoster = { Set((ada.page.events(after: 0).events.last { $0.kind == "roster" }?.roster ?? []).map(\.identity)) }
        _ = waitFor(5) { pageRoster() == ["ada", "bob"] }
        seen.pagesRoster = pageRoster()

        // The browser's packets reach bob over the trunk, and bob's reach the browser.
        for sequence in 1...50 as ClosedRange<UInt16> {
            try ada.sendRTP(sequence: sequence)
            bob.sendMedia()
            usleep(20_000)
        }
        bob.pump(timeout: 2) { Set($0.received(from: 2222)).count >= 50 }
        seen.heardByBob = Set(bob.received(from: 2222))
        seen.heardByBrowser = Set(ada.receiveRTP(count: 50, timeout: 3).filter { $0.ssrc == bob.link.ssrc }.map(\.sequence))
        return seen
    }
}

/// Two relays of one cluster on 127.0.0.2 and .3, in-process, with the room "mixed" placed
/// on one of them (by load and hash, as the cluster places it): `home`, the other `other`.
private struct TwoRelays {
    struct Member {
        let relay: Relay
        let cluster: ClusterMember
        let key: RelayKey?
        let host: String
        let port: Int
    }

    let home: Member
    let other: Member
    let secret = TokenSecret.random()
    let sawEachOther: Bool
    /// Whether the cluster placed "mixed" (a loaded machine can make the store slow).
    let roomPlaced: Bool

    init(store: EtcdEndpoint, secure: Bool) throws {
        var logger = Logger(label: "cluster-browser-test")
        logger.logLevel = .error
        let secret = self.secret
        func start(_ host: String) throws -> Member {
            var configuration = RelayConfiguration()
            configuration.listen = HostAndPort(host: host, port: try freeUDPPort(host: host))
            configuration.threads = 1
            configuration.insecure = !secure
            configuration.acceptsBrowsers = true
            let metrics = RelayMetrics()
            let key = secure ? RelayKey() : nil
            let cluster = try ClusterMember(settings: ClusterSettings(endpoint: store, publicAddress: configuration.listen),
                                            metrics: ClusterMetrics(registry: metrics.registry), logger: logger)
            let relay = try Relay.start(configuration: configuration, secret: secret, relayKey: key, placement: cluster, logger: logger, metrics: metrics)
            return Member(relay: relay, cluster: cluster, key: key, host: host, port: configuration.listen.port)
        }
        let first = try start("127.0.0.2")
        let second = try start("127.0.0.3")
        sawEachOther = waitFor(15) { first.cluster.liveRelays.count == 2 && second.cluster.liveRelays.count == 2 }
        // A `parley` client would be redirected to where the room lands; the tests put it there.
        // A store slowed by a loaded machine can answer "unavailable" (its requests time out
        // after a second); a client would try again, and so does the test, until the room lands.
        let placed = Mutex<PlacementRoute?>(nil)
        let isPlaced = { (route: PlacementRoute?) -> Bool in
            switch route {
            case .here?, .elsewhere?: return true
            default: return false
            }
        }
        roomPlaced = waitFor(15) {
            let answer = placed.withLock { $0 }
            if isPlaced(answer) { return true }
            if answer == nil || answer != .pending {
                placed.withLock { $0 = .pending }
                let route = first.cluster.route(room: "mixed", region: nil) { route in placed.withLock { $0 = route } }
                if route != .pending { placed.withLock { $0 = route } }
            }
            return isPlaced(placed.withLock { $0 })
        }
        (home, other) = placed.withLock { $0 } == .here ? (first, second) : (second, first)
    }

    func token(_ identity: String) -> String {
        let now = WallClock.seconds()
        return AccessToken(identity: identity, room: "mixed", issuedAt: now, expiresAt: now + 600).signed(with: secret)
    }

    func stop() {
        home.relay.shutdown()
        other.relay.shutdown()
    }
}

private func waitFor(_ seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while !condition() {
        guard Date() < deadline else { return false }
        usleep(50_000)
    }
    return true
}
