import ParleyBasics
import ParleyRelay

/// A room across relays, as the cluster arranges it: this relay's presence in the rooms it has
/// members of (one record each in the store, under its lease), the trunks those records ask
/// for, and the reconcile that keeps the store in line with what the relay really does.
extension ClusterMember {
    /// Hands the relay the trunks and trust the view asks for now (``ParleyRelay/TrunkPlan``):
    /// at start, then after every change the watch brings, every reconcile, and every failed
    /// turn while the store is away (the last view still says which trunks to keep). Called
    /// from the watch's or the member's threads; the relay gets one plan at a time, never an
    /// older plan after a newer one.
    func updateTrunkPlan() {
        guard let relay = relay.withLock({ $0 }) else { return }
        let hosted = relay.hostedRooms()
        let (plan, version) = state.withLock { state in
            // A room this relay just recorded its presence in has a member joining here, not
            // yet counted: its trunks open now, not at the next reconcile. Once the reconcile
            // has seen the room empty here, only members count.
            let arriving = Set(state.view.roomsPresentHere.filter { state.absentSince[$0] == nil })
            state.planVersion &+= 1
            return (state.view.plan(hosted: hosted, arriving: arriving), state.planVersion)
        }
        appliedPlan.withLock { applied in
            guard version > applied else { return }  // a newer plan was applied meanwhile
            applied = version
            relay.follow(plan)
        }
    }

    /// Records in the store that this relay has members of `room` (once; the reconcile
    /// repairs a write that failed), so the other relays present there trunk to it.
    func recordPresence(in room: String) {
        let lease: Int64? = state.withLock { state in
            guard let lease = state.lease, !state.view.isPresent(in: room), state.presenceInFlight.insert(room).inserted else { return nil }
            return lease
        }
        guard let lease else { return }
        Task {
            let key = ClusterKeys.presence(room: room, relay: selfRecordID)
            let value = RoomPlacementRecord(relay: selfRecordID).encoded
            let written = (try? await etcd.put(key, value: value, lease: lease)) != nil
            state.withLock { state in
                state.presenceInFlight.remove(room)
                if written { state.view.apply(.put(EtcdEntry(key: key, value: value, lease: lease))) }
            }
            if written { updateTrunkPlan() }
        }
    }

    /// Brings the store in line with what this relay really does: rooms with members here but
    /// no placement are claimed back (the lease expired while the store was away), and their
    /// presence is recorded if it is missing (so the room's other relays trunk to this one,
    /// wherever it is placed); rooms placed here, or present here, that stayed empty are
    /// released; the load is reported when it changed; the relay is handed its trunk plan.
    func reconcile() async {
        defer { updateTrunkPlan() }
        guard let lease = state.withLock({ $0.lease }) else { return }
        let hosted = hostedRooms()
        let now = MonotonicClock.now()
        let grace = UInt64(settings.releaseEmptyRoomsAfterMilliseconds) * 1_000_000
        let (claimBack, missingPresence, release, absent, load) = state.withLock {
            state -> ([String], [String], [(String, [UInt8])], [String], Int?) in
            var claimBack: [String] = []
            var missingPresence: [String] = []
            for (room, members) in hosted where members > 0 {
                state.emptySince[room] = nil
                state.absentSince[room] = nil
                if state.view.placements[room] == nil { claimBack.append(room) }
                if !state.view.isPresent(in: room) { missingPresence.append(room) }
            }
            var release: [(String, [UInt8])] = []
            for room in state.view.roomsHere where (hosted[room] ?? 0) == 0 {
                let since = state.emptySince[room] ?? now
                state.emptySince[room] = since
                if now &- since >= grace, let value = state.view.placements[room]?.value {
                    release.append((room, value))
                    state.emptySince[room] = nil
                }
            }
            state.emptySince = state.emptySince.filter { state.view.placements[$0.key] != nil }
            var absent: [String] = []
            for room in state.view.roomsPresentHere where (hosted[room] ?? 0) == 0 {
                let since = state.absentSince[room] ?? now
                state.absentSince[room] = since
                if now &- since >= grace {
                    absent.append(room)
                    state.absentSince[room] = nil
                }
            }
            state.absentSince = state.absentSince.filter { state.view.isPresent(in: $0.key) }
            let load = hosted.values.reduce(0, +)
            let changed = load != state.lastReportedLoad
            if changed { state.lastReportedLoad = load }
            metrics.roomsHosted.record(state.view.roomsHere.count)
            return (claimBack, missingPresence, release, absent, changed ? load : nil)
        }
        for room in missingPresence { recordPresence(in: room) }
        for room in claimBack {
            let value = RoomPlacementRecord(relay: selfRecordID).encoded
            if let outcome = try? await etcd.create(ClusterKeys.room(room), value: value, lease: lease) {
                if outcome == .created { logger.notice("claimed back a room this relay still hosts", metadata: ["room": "\(room)"]) }
                let entry: EtcdEntry
                if case let .exists(existing) = outcome { entry = existing } else { entry = EtcdEntry(key: ClusterKeys.room(room), value: value, lease: lease) }
                state.withLock { $0.view.apply(.put(entry)) }
            }
        }
        for (room, value) in release {
            if (try? await etcd.delete(ClusterKeys.room(room), ifValue: value)) == true {
                state.withLock { $0.view.apply(.delete(key: ClusterKeys.room(room))) }
                logger.info("released an empty room", metadata: ["room": "\(room)"])
            }
        }
        let presenceValue = RoomPlacementRecord(relay: selfRecordID).encoded
        for room in absent {
            let key = ClusterKeys.presence(room: room, relay: selfRecordID)
            if (try? await etcd.delete(key, ifValue: presenceValue)) != nil {
                state.withLock { $0.view.apply(.delete(key: key)) }
            }
        }
        if let load {
            let record = ClusterRelayRecord(address: selfRecordID, key: publicKey, load: load, region: settings.region, lease: lease)
            try? await etcd.put(ClusterKeys.relay(selfRecordID), value: record.encoded, lease: lease)
        }
    }
}
