import ParleyWire

/// Where rooms live when this relay is one of several, and which other relays it trunks to:
/// what a cluster (`ParleyCluster`'s `ClusterMember`) tells the relay. The relay knows the
/// cluster only through this protocol, so it never names the store and never waits on it.
/// A relay started without one admits every join, trusts no relay and opens no trunk.
///
/// What crosses, and which way:
///
/// | from the relay | to the relay |
/// | --- | --- |
/// | a verified join's room and region (``route(room:region:whenDecided:)``) | where it goes: here, a redirect, parked, or refused |
/// | its key and the rooms it hosts (``PlacedRelay``, at ``start(_:)``) | the trunk plan: whom to trust, which trunks to keep (``TrunkPlan``) |
/// | | other relays for members to fall back to (``fallbacks(limit:)``) |
///
/// The relay calls ``start(_:)`` once its sockets are bound (a relay the cluster sends
/// clients to must already listen), and ``stop()`` first thing at shutdown, so the rooms it
/// hosted are free before its members, told goodbye, rejoin elsewhere.
public protocol RoomPlacement: AnyObject, Sendable {
    /// Where a verified join for `room` goes; `region` is the one its token names. Answers
    /// from what the placement knows, never waiting on a store: ``PlacementRoute/pending``
    /// means the answer is being found, and `whenDecided` is then called once with it, on
    /// another thread.
    func route(room: String, region: String?, whenDecided: @escaping @Sendable (PlacementRoute) -> Void) -> PlacementRoute
    /// Where a verified join goes for a member that cannot be sent to another relay (a
    /// browser: its page came from this relay, its media reaches this port over ICE): `.here`
    /// when the room lives here or this relay joins it over a trunk, `.pending` while a room
    /// nobody hosts is placed (`whenDecided` is then called once), `.unavailable` with the
    /// reason otherwise; never `.elsewhere`.
    func routePinned(room: String, whenDecided: @escaping @Sendable (PlacementRoute) -> Void) -> PlacementRoute
    /// Other relays a member can fall back to if this one goes away, best first.
    func fallbacks(limit: Int) -> [ControlMessage.ClusterRelay]
    /// Begins: registers the relay and hands it trunk plans through `relay.follow` until ``stop()``.
    func start(_ relay: PlacedRelay)
    /// Leaves: this relay's rooms are given up at once. Blocks until done (about a second at most).
    func stop()
}

/// Where a join goes.
public enum PlacementRoute: Sendable, Equatable {
    case here
    /// The room is on another relay: the member is sent there.
    case elsewhere(ControlMessage.ClusterRelay)
    /// The placement is asking; the join waits for its answer.
    case pending
    /// The room cannot be placed now; the text says why, for the person joining.
    case unavailable(String)
}

/// What the relay gives its placement when it starts.
public struct PlacedRelay: Sendable {
    /// The relay's public key as invites write it; empty for a relay started `--insecure`.
    public let publicKeyText: String
    /// Rooms with members on this relay, and how many.
    public let hostedRooms: @Sendable () -> [String: Int]
    /// Where trunk plans go; called one plan at a time, never an older plan after a newer one.
    public let follow: @Sendable (TrunkPlan) -> Void

    public init(publicKeyText: String, hostedRooms: @escaping @Sendable () -> [String: Int], follow: @escaping @Sendable (TrunkPlan) -> Void) {
        self.publicKeyText = publicKeyText
        self.hostedRooms = hostedRooms
        self.follow = follow
    }
}

/// What the relay should do about trunks now: trust these relays' keys, and keep these trunks
/// open (those it opens; of each pair of relays one opens, the other accepts).
public struct TrunkPlan: Sendable, Equatable {
    public struct Trunk: Sendable, Hashable {
        public var room: String
        public var peer: RelayPeer

        public init(room: String, peer: RelayPeer) {
            self.room = room
            self.peer = peer
        }
    }

    public var trusted: [RelayPeer]
    public var trunks: [Trunk]

    public init(trusted: [RelayPeer], trunks: [Trunk]) {
        self.trusted = trusted
        self.trunks = trunks
    }
}
