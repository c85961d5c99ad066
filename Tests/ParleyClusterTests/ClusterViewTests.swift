@testable import ParleyRelay
import Testing

/// Placement as a relay decides it from its view of the cluster: plain values, no store.
@Suite("Cluster view and placement")
struct ClusterViewTests {
    static func relay(_ address: String, load: Int = 0, region: String? = nil, lease: Int64 = 1) -> EtcdEntry {
        let record = ClusterRelayRecord(address: address, key: "", load: load, region: region, lease: lease)
        return EtcdEntry(key: "/parley/relays/\(address)", value: record.encoded)
    }

    static func room(_ name: String, on relay: String) -> EtcdEntry {
        EtcdEntry(key: "/parley/rooms/\(name)", value: RoomPlacementRecord(relay: relay).encoded)
    }

    var view: ClusterView {
        var view = ClusterView(selfID: "10.0.0.1:7800")
        view.reset(to: [Self.relay("10.0.0.1:7800", load: 5), Self.relay("10.0.0.2:7800", load: 1), Self.relay("10.0.0.3:7800", load: 3)])
        return view
    }

    @Test func aRoomGoesToTheLeastLoadedRelay() {
        #expect(view.candidates(for: "standup", region: nil).map(\.address) == ["10.0.0.2:7800", "10.0.0.3:7800", "10.0.0.1:7800"])
    }

    @Test func roomsAlreadyPlacedCountAsLoadSoABurstOfNewRoomsSpreads() {
        var view = view
        // Three new rooms on the idlest relay make it as busy as the next.
        for name in ["a", "b", "c"] { view.apply(.put(Self.room(name, on: "10.0.0.2:7800"))) }
        #expect(view.candidates(for: "d", region: nil).first?.address == "10.0.0.3:7800")
        var placed: [String: Int] = [:]
        for index in 0..<30 {
            let best = view.candidates(for: "room-\(index)", region: nil)[0].address
            placed[best, default: 0] += 1
            view.apply(.put(Self.room("room-\(index)", on: best)))
        }
        // 30 rooms over relays at loads 5, 1+3 and 3: each ends within one of the others.
        let totals = ["10.0.0.1:7800": 5, "10.0.0.2:7800": 4, "10.0.0.3:7800": 3].map { $0.value + placed[$0.key, default: 0] }
        #expect(totals.max()! - totals.min()! <= 1, "\(placed)")
    }

    @Test func equalRelaysAreChosenAlikeByEveryRelayAndDifferentlyForDifferentRooms() {
        var one = ClusterView(selfID: "a:1"), two = ClusterView(selfID: "b:1")
        let entries = (1...4).map { Self.relay("10.0.0.\($0):7800") }
        one.reset(to: entries)
        two.reset(to: entries.reversed())
        let firsts = Set((0..<40).map { one.candidates(for: "r\($0)", region: nil)[0].address })
        for index in 0..<40 {
            #expect(one.candidates(for: "r\(index)", region: nil).map(\.address) == two.candidates(for: "r\(index)", region: nil).map(\.address))
        }
        #expect(firsts.count == 4, "40 rooms on four idle relays should use all four: \(firsts)")
    }

    @Test func aRegionTheTokenNamesWinsOverLoadWhenARelayServesIt() {
        var view = ClusterView(selfID: "x")
        view.reset(to: [Self.relay("10.0.0.1:7800", load: 0, region: "us"), Self.relay("10.0.0.2:7800", load: 40, region: "eu"), Self.relay("10.0.0.3:7800", load: 50, region: "eu")])
        #expect(view.candidates(for: "r", region: "eu").map(\.address) == ["10.0.0.2:7800", "10.0.0.3:7800"])
        #expect(view.candidates(for: "r", region: "asia").first?.address == "10.0.0.1:7800", "no relay in the region: the least loaded of all")
    }

    @Test func aRoomRoutesHereElsewhereOrNowhere() {
        var view = view
        view.apply(.put(Self.room("mine", on: "10.0.0.1:7800")))
        view.apply(.put(Self.room("theirs", on: "10.0.0.3:7800")))
        #expect(view.route(room: "mine") == .here)
        #expect(view.route(room: "theirs") == .elsewhere(view.relays["10.0.0.3:7800"]!))
        #expect(view.route(room: "new") == .unplaced)
        #expect(view.roomsHere == ["mine"])
    }

    @Test func aRoomWhoseRelayHasGoneIsUnplacedUntilItsPlacementGoesToo() {
        var view = view
        view.apply(.put(Self.room("orphan", on: "10.0.0.3:7800")))
        view.apply(.delete(key: "/parley/relays/10.0.0.3:7800"))
        #expect(view.route(room: "orphan") == .unplaced)
        #expect(!view.candidates(for: "orphan", region: nil).contains { $0.address == "10.0.0.3:7800" })
        view.apply(.delete(key: "/parley/rooms/orphan"))
        #expect(view.placements["orphan"] == nil)
        #expect(view.roomCount(on: "10.0.0.3:7800") == 0)
    }

    @Test func strayKeysAndUnreadableValuesInTheStoreAreIgnored() {
        var view = view
        view.apply(.put(EtcdEntry(key: "/parley/rooms/junk", value: Array("not json".utf8))))
        view.apply(.put(EtcdEntry(key: "/parley/relays/10.0.0.9:7800", value: Array("{\"address\":\"elsewhere:1\"}".utf8))))
        view.apply(.put(EtcdEntry(key: "/parley/other", value: [1, 2, 3])))
        view.apply(.put(EtcdEntry(key: "/parley/rooms/", value: RoomPlacementRecord(relay: "x").encoded)))
        #expect(view.route(room: "junk") == .unplaced)
        #expect(view.relays.count == 3)
        #expect(view.placements.isEmpty)
    }

    @Test func fallbacksAreTheOtherRelaysLeastLoadedFirst() {
        #expect(view.others(limit: 4).map(\.address) == ["10.0.0.2:7800", "10.0.0.3:7800"])
        #expect(view.others(limit: 1).map(\.address) == ["10.0.0.2:7800"])
    }
}
