import ParleyBasics
@testable import ParleyCluster
import ParleyRelay
import ParleySecurity
import Testing

/// What a relay of a cluster hands its relay (the trunk plan) and what it reads from the store
/// (records), as plain values: no store, no socket.
@Suite("Cluster plan and records")
struct ClusterPlanTests {
    static let keys = (0..<4).map { _ in RelayKey().publicKeyText }

    static func relay(_ address: String, key: String) -> EtcdEntry {
        EtcdEntry(key: "/parley/relays/\(address)", value: ClusterRelayRecord(address: address, key: key, load: 0, region: nil, lease: 1).encoded)
    }

    static func present(_ room: String, on relay: String) -> EtcdEntry {
        EtcdEntry(key: "/parley/present/\(room)/\(relay)", value: RoomPlacementRecord(relay: relay).encoded)
    }

    /// Relays .1 (this one), .2 and .3 with keys, .4 run `--insecure`.
    static var view: ClusterView {
        var view = ClusterView(selfID: "10.0.0.1:7800")
        view.reset(to: [
            relay("10.0.0.1:7800", key: keys[0]), relay("10.0.0.2:7800", key: keys[1]), relay("10.0.0.3:7800", key: keys[2]),
            relay("10.0.0.4:7800", key: ""),
        ])
        return view
    }

    @Test func thePlanTrustsTheLiveRelaysWithKeysAndOpensTheTrunksOfTheRoomsWithMembersHere() throws {
        var view = Self.view
        for relay in ["10.0.0.1:7800", "10.0.0.2:7800", "10.0.0.4:7800"] { view.apply(.put(Self.present("standup", on: relay))) }
        view.apply(.put(Self.present("empty", on: "10.0.0.3:7800")))
        let plan = view.plan(hosted: ["standup": 2])
        #expect(plan.trusted.map(\.address.description) == ["10.0.0.1:7800", "10.0.0.2:7800", "10.0.0.3:7800"], "an --insecure relay has no key to trust")
        #expect(plan.trusted.map(\.publicKeyText) == Array(Self.keys.prefix(3)))
        // To .2 (present, sorts after this one); not to .4, which has no key to trunk with.
        #expect(plan.trunks == [TrunkPlan.Trunk(room: "standup", peer: try #require(plan.trusted.first { $0.address.description == "10.0.0.2:7800" }))])
        #expect(view.plan(hosted: [:]).trunks.isEmpty, "no member here, no trunk")
    }

    /// A member joining a room, before the relay counts it: the presence was just written, and
    /// the trunks open with the join instead of at the next reconcile.
    @Test func aRoomJustJoinedHereCountsBeforeItsMemberDoes() {
        var view = Self.view
        view.apply(.put(Self.present("standup", on: "10.0.0.1:7800")))
        view.apply(.put(Self.present("standup", on: "10.0.0.3:7800")))
        #expect(view.plan(hosted: [:]).trunks.isEmpty)
        #expect(view.plan(hosted: [:], arriving: ["standup"]).trunks.map(\.peer.address.description) == ["10.0.0.3:7800"])
    }

    /// A relay's record names where clients go and the key they pin: one whose key is not a
    /// key sends nobody there, and is not trusted.
    @Test func aRecordWithAnUnreadableKeyIsNeitherARedirectNorATrustedPeer() {
        let broken = ClusterRelayRecord(address: "10.0.0.9:7800", key: "not-a-key", load: 0, region: nil, lease: 1)
        #expect(broken.clientRelay == nil)
        #expect(RelayPeer(broken) == nil)
        if case .unavailable(let text) = ClusterMember.redirect(to: broken) {
            #expect(text.contains("its key is unreadable"))
        } else {
            Issue.record("a redirect to a relay whose key is unreadable")
        }
        let insecure = ClusterRelayRecord(address: "10.0.0.9:7800", key: "", load: 0, region: nil, lease: 1)
        #expect(insecure.clientRelay?.publicKey == [] && RelayPeer(insecure) == nil)
        let good = ClusterRelayRecord(address: "10.0.0.9:7800", key: Self.keys[3], load: 0, region: nil, lease: 1)
        #expect(good.clientRelay?.publicKey.count == 32 && RelayPeer(good)?.publicKeyText == Self.keys[3])
    }

    /// The store is shared: whatever bytes sit under `/parley/`, reading them neither traps nor
    /// puts a relay, room or presence in the view that Parley did not write.
    @Test func anyBytesUnderTheClustersKeysAreReadWithoutTrapping() {
        var random = SplitMix64(seed: 18)
        let valid = [
            ClusterRelayRecord(address: "10.0.0.5:7800", key: Self.keys[3], load: 3, region: "eu", lease: 9).encoded,
            RoomPlacementRecord(relay: "10.0.0.2:7800").encoded,
        ]
        let keys = ["/parley/relays/10.0.0.5:7800", "/parley/rooms/standup", "/parley/present/standup/10.0.0.2:7800", "/parley/canary/x", "/parley/"]
        for round in 0..<5_000 {
            var bytes = valid[round % 2]
            switch round % 3 {
            case 0: bytes = (0..<Int.random(in: 0...200, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            case 1: bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &random)))
            default: bytes[Int.random(in: 0..<bytes.count, using: &random)] ^= 1 << UInt8.random(in: 0...7, using: &random)
            }
            var view = Self.view
            let key = keys[Int.random(in: 0..<keys.count, using: &random)]
            view.apply(.put(EtcdEntry(key: key, value: bytes)))
            if let record = view.relays["10.0.0.5:7800"] { #expect(record.id == "10.0.0.5:7800") }
            #expect(view.relays.count <= 5)
            _ = view.plan(hosted: ["standup": 1])
            _ = view.route(room: "standup", region: "eu")
        }
    }
}
