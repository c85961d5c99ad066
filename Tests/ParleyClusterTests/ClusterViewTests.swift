@testable import ParleyCluster
import ParleyRelay
import ParleySecurity
import Testing

/// Placement as a relay decides it from its view of the cluster: plain values, no store.
@Suite("Cluster view and placement")
struct ClusterViewTests {
    static func relay(_ address: String, load: Int = 0, region: String? = nil, lease: Int64 = 1, key: String = "") -> EtcdEntry {
        let record = ClusterRelayRecord(address: address, key: key, load: load, region: region, lease: lease)
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

    /// A record must read as a relay a client can be sent to: an address a `joined` can carry
    /// (HOST:PORT, at most 255 bytes) and a key that is a key, else it is not a relay at all.
    @Test func relayRecordsWhoseAddressOrKeyCannotServeAClientAreIgnored() {
        var view = view
        let key = RelayKey().publicKeyText
        let long = String(repeating: "a", count: 290) + ".example:7800"
        view.apply(.put(Self.relay(long, key: key)))
        view.apply(.put(Self.relay("10.0.0.7", key: key)))
        view.apply(.put(Self.relay("10.0.0.8:7800", key: "not-a-key")))
        view.apply(.put(Self.relay("10.0.0.9:7800", key: String(key.dropLast(2)))))
        #expect(view.relays.count == 3, "only the three sound relays: \(view.relays.keys.sorted())")
        view.apply(.put(Self.relay("10.0.0.6:7800", key: key)))
        #expect(view.relays.count == 4, "a sound record is taken")
    }

    @Test func fallbacksAreTheOtherRelaysLeastLoadedFirst() {
        #expect(view.others(limit: 4).map(\.address) == ["10.0.0.2:7800", "10.0.0.3:7800"])
        #expect(view.others(limit: 1).map(\.address) == ["10.0.0.2:7800"])
    }

    // MARK: Rooms across regions

    static func present(_ room: String, on relay: String) -> EtcdEntry {
        EtcdEntry(key: "/parley/present/\(room)/\(relay)", value: RoomPlacementRecord(relay: relay).encoded)
    }

    /// A relay's key as records carry it (a record whose key is not one is not read).
    static let key = RelayKey().publicKeyText

    /// Relays eu-1 (this one), eu-2, us-1 and ap-1; "world" lives on us-1.
    static func regional(selfID: String = "10.0.1.1:7800", selfRegion: String? = "eu", key: String = ClusterViewTests.key) -> ClusterView {
        var view = ClusterView(selfID: selfID, selfRegion: selfRegion)
        view.reset(to: [
            relay("10.0.1.1:7800", load: 3, region: "eu", key: key), relay("10.0.1.2:7800", load: 0, region: "eu", key: key),
            relay("10.0.2.1:7800", region: "us", key: key), relay("10.0.3.1:7800", region: "ap", key: key), room("world", on: "10.0.2.1:7800"),
        ])
        return view
    }

    @Test func aMemberJoinsARoomHomedInAnotherRegionOnARelayOfItsOwnRegion() {
        let view = Self.regional()
        // The token names eu, or names nothing and the member reached this eu relay: it stays.
        #expect(view.route(room: "world", region: "eu") == .here)
        #expect(view.route(room: "world") == .here)
        // A member from us goes to the room's home; one from a region with no relay too.
        #expect(view.route(room: "world", region: "us") == .elsewhere(view.relays["10.0.2.1:7800"]!))
        #expect(view.route(room: "world", region: "sa") == .elsewhere(view.relays["10.0.2.1:7800"]!))
        // From ap, to ap's relay.
        #expect(view.route(room: "world", region: "ap") == .elsewhere(view.relays["10.0.3.1:7800"]!))
    }

    /// A browser cannot follow a redirect: it joins the relay whose page it opened, which
    /// joins the room over a trunk when its home is elsewhere, in whatever region.
    @Test func aBrowserJoinsHereAndTheRelayTrunksToTheRoomsHome() {
        let view = Self.regional()
        #expect(view.routePinned(room: "world") == .here, "homed on us-1: this eu relay trunks to it")
        #expect(view.routePinned(room: "nowhere") == .unplaced, "a new room is placed first")
        var home = Self.regional(selfID: "10.0.2.1:7800", selfRegion: "us")
        home.apply(.put(Self.present("world", on: "10.0.2.1:7800")))
        #expect(home.routePinned(room: "world") == .here)
        // Without regions too: a browser on relay 2 of a room on relay 1.
        var plain = ClusterView(selfID: "10.0.0.2:7800")
        plain.reset(to: [Self.relay("10.0.0.1:7800", key: Self.key), Self.relay("10.0.0.2:7800", key: Self.key), Self.room("standup", on: "10.0.0.1:7800")])
        #expect(plain.route(room: "standup") == .elsewhere(plain.relays["10.0.0.1:7800"]!), "a parley client is sent to the home")
        #expect(plain.routePinned(room: "standup") == .here, "a browser stays, over a trunk")
        // Relays without keys cannot trunk: the browser is refused with the home named.
        let insecure = Self.regional(key: "")
        #expect(insecure.routePinned(room: "world") == .elsewhere(insecure.relays["10.0.2.1:7800"]!))
    }

    @Test func relaysWithoutKeysCannotTrunkSoTheirRoomsStayOnTheirHome() {
        let view = Self.regional(key: "")  // relays run --insecure
        #expect(view.route(room: "world", region: "eu") == .elsewhere(view.relays["10.0.2.1:7800"]!))
    }

    @Test func membersOfOneRegionGatherOnTheRelayAlreadyPresentInTheRoom() {
        var view = Self.regional()
        view.apply(.put(Self.present("world", on: "10.0.1.2:7800")))
        #expect(view.route(room: "world", region: "eu") == .elsewhere(view.relays["10.0.1.2:7800"]!))
        // Seen from that relay, it stays.
        var other = Self.regional(selfID: "10.0.1.2:7800")
        other.apply(.put(Self.present("world", on: "10.0.1.2:7800")))
        #expect(other.route(room: "world") == .here)
    }

    @Test func withoutRegionsEveryoneOfARoomJoinsItsHome() {
        var view = view
        view.apply(.put(Self.room("standup", on: "10.0.0.3:7800")))
        view.apply(.put(Self.present("standup", on: "10.0.0.2:7800")))
        #expect(view.route(room: "standup") == .elsewhere(view.relays["10.0.0.3:7800"]!))
        #expect(view.route(room: "standup", region: "eu") == .elsewhere(view.relays["10.0.0.3:7800"]!), "no relay is in eu")
    }

    @Test func theRelaysPresentInARoomTrunkToEachOtherEachPairOpenedByOne() {
        var view = Self.regional()
        for relay in ["10.0.1.1:7800", "10.0.2.1:7800", "10.0.3.1:7800"] { view.apply(.put(Self.present("world", on: relay))) }
        view.apply(.put(Self.present("other", on: "10.0.3.1:7800")))
        // 10.0.1.1 sorts first: it opens both of its trunks for "world", none for a room without members here.
        #expect(view.trunks(hosted: ["world": 2, "other": 0]).map { "\($0.room)>\($0.relay.id)" } == ["world>10.0.2.1:7800", "world>10.0.3.1:7800"])
        var us = Self.regional(selfID: "10.0.2.1:7800", selfRegion: "us")
        for relay in ["10.0.1.1:7800", "10.0.2.1:7800", "10.0.3.1:7800"] { us.apply(.put(Self.present("world", on: relay))) }
        #expect(us.trunks(hosted: ["world": 1]).map(\.relay.id) == ["10.0.3.1:7800"], "the us relay opens only to the one after it")
        // A relay gone from the cluster is no trunk's peer; its presence going removes it.
        view.apply(.delete(key: "/parley/relays/10.0.3.1:7800"))
        #expect(view.trunks(hosted: ["world": 2]).map(\.relay.id) == ["10.0.2.1:7800"])
        view.apply(.delete(key: "/parley/present/world/10.0.2.1:7800"))
        #expect(view.trunks(hosted: ["world": 2]).isEmpty)
        #expect(view.isPresent(in: "world") && view.roomsPresentHere == ["world"])
    }

    @Test func aRelaysOwnPresenceCanBeForgottenToBeWrittenAgain() {
        var view = Self.regional()
        view.apply(.put(Self.present("world", on: "10.0.1.1:7800")))
        view.apply(.put(Self.present("world", on: "10.0.2.1:7800")))
        view.forgetPresence(of: "10.0.1.1:7800")
        #expect(!view.isPresent(in: "world") && view.present["world"] == ["10.0.2.1:7800"])
    }

    @Test func presenceKeysThatAreNotParleysAreIgnored() {
        var view = Self.regional()
        view.apply(.put(EtcdEntry(key: "/parley/present/world", value: RoomPlacementRecord(relay: "x").encoded)))
        view.apply(.put(EtcdEntry(key: "/parley/present//10.0.2.1:7800", value: RoomPlacementRecord(relay: "10.0.2.1:7800").encoded)))
        view.apply(.put(EtcdEntry(key: "/parley/present/world/10.0.2.1:7800", value: RoomPlacementRecord(relay: "someone else").encoded)))
        view.apply(.put(EtcdEntry(key: "/parley/present/world/10.0.3.1:7800", value: Array("junk".utf8))))
        #expect(view.present.isEmpty)
    }
}
