/// One relay's picture of the cluster: the live relays and where each room lives, as the
/// store's watch last told it. Plain Swift, no clock and no socket: the join path reads it
/// under a lock (``ClusterMember``) and never waits on the store.
///
/// Placement picks, for a room nobody hosts, the relay with the least load, counting each
/// room placed on a relay as one member until its own report catches up (so a burst of new
/// rooms spreads instead of piling onto the relay that looked idlest a second ago). Ties go
/// to the highest rendezvous hash of room and relay, so relays placing at the same moment
/// pick alike. A region the token names wins over load when any relay is in it.
struct ClusterView: Sendable {
    let selfID: String
    private(set) var relays: [String: ClusterRelayRecord] = [:]
    /// Room → the stored placement (its relay and the value's bytes, which a release compares).
    private(set) var placements: [String: (relay: String, value: [UInt8])] = [:]
    private var roomsPerRelay: [String: Int] = [:]

    init(selfID: String) { self.selfID = selfID }

    enum Route: Sendable, Equatable {
        case here
        case elsewhere(ClusterRelayRecord)
        /// No relay hosts the room: it must be placed.
        case unplaced
    }

    func route(room: String) -> Route {
        guard let placement = placements[room] else { return .unplaced }
        if placement.relay == selfID { return .here }
        // A placement whose relay has no registration is on its way out (both live under
        // that relay's lease); until it goes, the room cannot be reached there.
        guard let relay = relays[placement.relay] else { return .unplaced }
        return .elsewhere(relay)
    }

    /// Relays to place `room` on, best first.
    func candidates(for room: String, region: String?) -> [ClusterRelayRecord] {
        var pool = Array(relays.values)
        if let region, pool.contains(where: { $0.region == region }) {
            pool = pool.filter { $0.region == region }
        }
        return pool.sorted { a, b in
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
            }
        case let .delete(key):
            if let id = Self.name(key, after: ClusterKeys.relaysPrefix) {
                relays[id] = nil
            } else if let room = Self.name(key, after: ClusterKeys.roomsPrefix) {
                removePlacement(room)
            }
        }
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
