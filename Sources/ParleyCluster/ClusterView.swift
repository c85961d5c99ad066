import ParleyRelay

/// One relay's picture of the cluster: the live relays, where each room lives, and which relays
/// have members of it, as the store's watch last told it. Plain Swift, no clock and no socket:
/// the join path reads it under a lock (``ClusterMember``) and never waits on the store.
///
/// Placement picks, for a room nobody hosts, the relay with the least load, counting each
/// room placed on a relay as one member until its own report catches up (so a burst of new
/// rooms spreads instead of piling onto the relay that looked idlest a second ago). Ties go
/// to the highest rendezvous hash of room and relay, so relays placing at the same moment
/// pick alike. A region the token names wins over load when any relay is in it.
///
/// A placed room can span relays: a member whose region (the token's `region`, else the
/// region of the relay it reached) has a relay while the room's home is elsewhere joins in
/// its own region, on the relay already present in the room there if any, and the relays
/// present in the room trunk to each other (``trunks(hosted:)``). Without regions everyone
/// of a room joins its home, one relay, as the shortest path between them.
struct ClusterView: Sendable {
    let selfID: String
    /// This relay's own region, for members whose token names none (they chose this relay).
    let selfRegion: String?
    private(set) var relays: [String: ClusterRelayRecord] = [:]
    /// Room → the stored placement (its relay and the value's bytes, which a release compares).
    private(set) var placements: [String: (relay: String, value: [UInt8])] = [:]
    /// Room → the relays with members of it (their presence records).
    private(set) var present: [String: Set<String>] = [:]
    private var roomsPerRelay: [String: Int] = [:]

    init(selfID: String, selfRegion: String? = nil) {
        self.selfID = selfID
        self.selfRegion = selfRegion
    }

    enum Route: Sendable, Equatable {
        case here
        case elsewhere(ClusterRelayRecord)
        /// No relay hosts the room: it must be placed.
        case unplaced
    }

    /// Where a member joins `room`: `region` is the region its token names, if any.
    func route(room: String, region tokenRegion: String? = nil) -> Route {
        guard let placement = placements[room] else { return .unplaced }
        // A placement whose relay has no registration is on its way out (both live under
        // that relay's lease); until it goes, the room cannot be reached there.
        guard placement.relay == selfID || relays[placement.relay] != nil else { return .unplaced }
        let target = relay(for: room, home: placement.relay, memberRegion: tokenRegion ?? selfRegion)
        if target == selfID { return .here }
        guard let relay = relays[target] else { return .unplaced }
        return .elsewhere(relay)
    }

    /// Where a member that cannot be sent to another relay joins `room`: a browser, whose page
    /// came from this relay and whose media reaches this relay's port over ICE. Here when the
    /// room lives here, or when this relay can join it over a trunk to its home (both have
    /// keys), as a regional member would; else the home, which the caller refuses with a
    /// reason, since the browser cannot follow a redirect.
    func routePinned(room: String) -> Route {
        guard let placement = placements[room], placement.relay == selfID || relays[placement.relay] != nil else { return .unplaced }
        guard placement.relay != selfID, let home = relays[placement.relay] else { return .here }
        let canTrunk = !home.key.isEmpty && relays[selfID]?.key.isEmpty == false
        return canTrunk ? .here : .elsewhere(home)
    }

    /// The relay a member from `memberRegion` should be on: the room's home, unless the home
    /// is in another region and the member's region has a relay; then the relay of that region
    /// already present in the room, else this one if it is in the region, else the region's
    /// best candidate (so members of one region gather on one relay).
    /// Only relays with a key can trunk (an `--insecure` relay has none), so a room whose home
    /// has none stays on its home.
    private func relay(for room: String, home: String, memberRegion: String?) -> String {
        guard let region = memberRegion, self.region(of: home) != region, relays[home]?.key.isEmpty == false else { return home }
        let regional = relays.values.filter { $0.region == region && !$0.key.isEmpty }
        guard !regional.isEmpty else { return home }
        let presentHere = present[room] ?? []
        if let gathered = regional.filter({ presentHere.contains($0.id) }).map(\.id).min() { return gathered }
        if regional.contains(where: { $0.id == selfID }) { return selfID }
        return ranked(regional, for: room)[0].id
    }

    private func region(of relay: String) -> String? {
        relay == selfID ? (relays[selfID]?.region ?? selfRegion) : relays[relay]?.region
    }

    /// The trunks this relay opens: for each room with members here, one to every other live
    /// relay present in it whose ID sorts after this one's (of each pair the first opens, so
    /// two relays never race to open the same trunk; the other accepts it).
    func trunks(hosted: [String: Int]) -> [(room: String, relay: ClusterRelayRecord)] {
        var trunks: [(room: String, relay: ClusterRelayRecord)] = []
        for (room, members) in hosted where members > 0 {
            for id in (present[room] ?? []).sorted() where id > selfID {
                if let relay = relays[id] { trunks.append((room, relay)) }
            }
        }
        return trunks.sorted { ($0.room, $0.relay.id) < ($1.room, $1.relay.id) }
    }

    /// What the relay should do about trunks: trust the live relays that have keys, and open
    /// ``trunks(hosted:)``. `arriving` are rooms this relay just recorded its presence in for a
    /// member still joining: they count as hosted, so their trunks open with the join.
    func plan(hosted: [String: Int], arriving: Set<String> = []) -> TrunkPlan {
        var hosted = hosted
        for room in arriving where hosted[room, default: 0] == 0 { hosted[room] = 1 }
        return TrunkPlan(
            trusted: relays.values.sorted { $0.id < $1.id }.compactMap(RelayPeer.init),
            trunks: trunks(hosted: hosted).compactMap { trunk in RelayPeer(trunk.relay).map { TrunkPlan.Trunk(room: trunk.room, peer: $0) } })
    }

    /// Whether this relay's presence in `room` is recorded.
    func isPresent(in room: String) -> Bool { present[room]?.contains(selfID) == true }

    /// Rooms whose record says this relay has members there.
    var roomsPresentHere: [String] { present.compactMap { $0.value.contains(selfID) ? $0.key : nil } }

    /// Relays to place `room` on, best first.
    func candidates(for room: String, region: String?) -> [ClusterRelayRecord] {
        var pool = Array(relays.values)
        if let region, pool.contains(where: { $0.region == region }) {
            pool = pool.filter { $0.region == region }
        }
        return ranked(pool, for: room)
    }

    private func ranked(_ pool: [ClusterRelayRecord], for room: String) -> [ClusterRelayRecord] {
        pool.sorted { a, b in
            let (scoreA, scoreB) = (score(a), score(b))
            if scoreA != scoreB { return scoreA < scoreB }
            return Self.rendezvous(room, a.id) > Self.rendezvous(room, b.id)
        }
    }

    private func score(_ relay: ClusterRelayRecord) -> Int {
        max(0, relay.load) &+ (roomsPerRelay[relay.id] ?? 0)
    }

    /// Rooms this relay hosts, by the store.
    var roomsHere: [String] { placements.compactMap { $0.value.relay == selfID ? $0.key : nil } }

    func roomCount(on relay: String) -> Int { roomsPerRelay[relay] ?? 0 }

    /// Other live relays a client can fall back to, least loaded first.
    func others(limit: Int) -> [ClusterRelayRecord] {
        Array(relays.values.filter { $0.id != selfID }.sorted { score($0) < score($1) || (score($0) == score($1) && $0.id < $1.id) }.prefix(limit))
    }

    // MARK: Changes

    /// Replaces everything with a full read of the store's `/parley/` prefix.
    mutating func reset(to entries: [EtcdEntry]) {
        relays = [:]
        placements = [:]
        present = [:]
        roomsPerRelay = [:]
        for entry in entries { apply(.put(entry)) }
    }

    mutating func apply(_ change: EtcdChange) {
        switch change {
        case let .put(entry):
            if let id = Self.name(entry.key, after: ClusterKeys.relaysPrefix) {
                if let record = ClusterRelayRecord.decode(entry.value), record.id == id { relays[id] = record } else { relays[id] = nil }
            } else if let room = Self.name(entry.key, after: ClusterKeys.roomsPrefix) {
                removePlacement(room)
                if let record = RoomPlacementRecord.decode(entry.value) {
                    placements[room] = (record.relay, entry.value)
                    roomsPerRelay[record.relay, default: 0] += 1
                }
            } else if let (room, relay) = Self.presence(entry.key) {
                if RoomPlacementRecord.decode(entry.value)?.relay == relay {
                    present[room, default: []].insert(relay)
                } else {
                    removePresence(room, relay)
                }
            }
        case let .delete(key):
            if let id = Self.name(key, after: ClusterKeys.relaysPrefix) {
                relays[id] = nil
            } else if let room = Self.name(key, after: ClusterKeys.roomsPrefix) {
                removePlacement(room)
            } else if let (room, relay) = Self.presence(key) {
                removePresence(room, relay)
            }
        }
    }

    /// Forgets `relay`'s presence in every room (this relay's own, when its lease changed).
    mutating func forgetPresence(of relay: String) {
        for room in present.keys { removePresence(room, relay) }
    }

    /// A relay whose lease the store no longer has (a claim for it failed): forget it now
    /// rather than wait for the watch to say so.
    mutating func forgetRelay(_ id: String) {
        relays[id] = nil
    }

    private mutating func removePlacement(_ room: String) {
        guard let old = placements.removeValue(forKey: room) else { return }
        roomsPerRelay[old.relay, default: 1] -= 1
        if roomsPerRelay[old.relay] == 0 { roomsPerRelay[old.relay] = nil }
    }

    private mutating func removePresence(_ room: String, _ relay: String) {
        present[room]?.remove(relay)
        if present[room]?.isEmpty == true { present[room] = nil }
    }

    /// The room and relay of a presence key; nil for anything else.
    private static func presence(_ key: String) -> (room: String, relay: String)? {
        guard let rest = name(key, after: ClusterKeys.presencePrefix), let slash = rest.firstIndex(of: "/") else { return nil }
        let room = String(rest[..<slash]), relay = String(rest[rest.index(after: slash)...])
        guard !room.isEmpty, !relay.isEmpty else { return nil }
        return (room, relay)
    }

    private static func name(_ key: String, after prefix: String) -> String? {
        guard key.hasPrefix(prefix), key.count > prefix.count else { return nil }
        return String(key.dropFirst(prefix.count))
    }

    /// FNV-1a over room, a separator and relay: stable across processes, unlike `Hasher`.
    static func rendezvous(_ room: String, _ relay: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in room.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        hash = (hash ^ 0xFF) &* 0x0000_0100_0000_01B3
        for byte in relay.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        // Finish with a mix so neighbouring names spread.
        hash ^= hash >> 33
        hash &*= 0xff51_afd7_ed55_8ccd
        hash ^= hash >> 33
        return hash
    }
}
