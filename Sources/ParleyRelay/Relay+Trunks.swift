import NIOCore
import ParleyBasics
import ParleyDatagrams
import ParleyWire

/// Cascading: a room spread over relays, joined by trunks. This is the API the cluster drives
/// (it decides which relays host a room and tells each whom to trust); a relay with no
/// cluster never opens a trunk and accepts none, since its trusted set is empty.
///
/// ```swift
/// relay.setTrustedRelays([relayB, relayC])          // keys from the cluster's store
/// relay.setTrunkEventHandler { event in … }          // re-place the room when a trunk ends
/// try relay.openTrunk(room: "standup", to: relayB)   // idempotent; the peer must trust us too
/// relay.closeTrunk(room: "standup", to: relayB)
/// ```
extension Relay {
    /// The relays whose trunks this relay accepts: a trunk is authenticated by its key, and a
    /// trunk init is taken only from a trusted relay's registered address (anything else is
    /// dropped before a Diffie-Hellman). Replaces the previous set; open trunks stay open.
    public func setTrustedRelays(_ peers: [RelayPeer]) {
        trunkDirectory?.setTrusted(peers)
    }

    /// Opens `room`'s trunk to `peer`, or does nothing when it is open or opening already.
    /// The trunk opens in the background; its outcome comes as a ``TrunkEvent``. Throws when
    /// this relay runs `--insecure` (no key to prove) or the room name is not valid.
    public func openTrunk(room: String, to peer: RelayPeer) throws(ConfigurationError) {
        guard trunkDirectory != nil else {
            throw ConfigurationError("trunks need the relay's key: this relay runs --insecure")
        }
        if let problem = ParleyNames.problem(withRoom: room) { throw ConfigurationError("cannot open a trunk: \(problem)") }
        guard let address = try? peer.address.socketAddress() else {
            throw ConfigurationError("cannot open a trunk to \(peer.address): not an IP address and port")
        }
        let destination = DatagramAddress(address)
        let worker = workers[0]
        worker.loop.execute { worker.trunks?.beginTrunk(room: room, to: peer, destination: destination) }
    }

    /// Closes `room`'s trunk to `peer` (telling the peer), or gives up opening it.
    public func closeTrunk(room: String, to peer: RelayPeer) {
        guard let trunkDirectory else { return }
        if let record = trunkDirectory.record(room: room, peerKey: peer.publicKey) {
            core.endTrunk(record.trunk, reason: .closedHere)
        } else if trunkDirectory.cancelOpening(room: room, peerKey: peer.publicKey) {
            trunkDirectory.emit(TrunkEvent(room: room, peer: peer, openedHere: true, change: .ended(.closedHere)))
        }
    }

    /// Where trunk events go; called on a relay loop's thread, so it must return quickly.
    public func setTrunkEventHandler(_ handler: (@Sendable (TrunkEvent) -> Void)?) {
        trunkDirectory?.setHandler(handler)
    }

    /// Keepalive, timeout and grace periods of every trunk (read at each tick); openings
    /// take their retransmit and timeout when they begin.
    public var trunkTimings: TrunkTimings {
        get { trunkDirectory?.timings ?? TrunkTimings() }
        set { trunkDirectory?.timings = newValue }
    }

    /// An open trunk, as the API reports it.
    public struct TrunkStatus: Sendable, Hashable {
        public let room: String
        public let peer: RelayPeer
        public let openedHere: Bool
    }

    /// The open trunks.
    public var openTrunks: [TrunkStatus] {
        (trunkDirectory?.openTrunks ?? []).map { TrunkStatus(room: $0.room, peer: $0.record.peer, openedHere: $0.record.openedHere) }
    }
}

extension Relay {
    /// Follows the placement's plan (``TrunkPlan``): trust every live relay of the cluster, and
    /// open the trunks the rooms present here need (those open or opening are left alone; one
    /// that ended is opened again at the next plan, within half a second, or after a backoff of
    /// 1–30 s when its openings kept failing). A trunk no plan asks for any more closes by
    /// itself once its room has no member here. An `--insecure` relay has no key to trunk with.
    func follow(_ plan: TrunkPlan) {
        guard let trunkDirectory else { return }
        setTrustedRelays(plan.trusted)
        let now = MonotonicClock.now()
        for trunk in plan.trunks {
            let (room, peer) = (trunk.room, trunk.peer)
            guard trunkDirectory.record(room: room, peerKey: peer.publicKey) == nil,
                  trunkDirectory.mayOpenAgain(room: room, peerKey: peer.publicKey, now: now) else { continue }
            do {
                try openTrunk(room: room, to: peer)
            } catch {
                logger.warning("cannot open a trunk the cluster asks for", metadata: ["room": "\(room)", "peer": "\(peer)", "error": "\(error)"])
            }
        }
    }
}
