/// News about a trunk, for whoever places rooms (the cluster): a trunk opened, or ended and why.
/// Delivered from a relay loop's thread (``Relay/setTrunkEventHandler(_:)``): a handler must
/// hand the event on and return, not block.
public struct TrunkEvent: Sendable, Hashable, CustomStringConvertible {
    public enum Change: Sendable, Hashable {
        case opened
        case ended(TrunkEndReason)
    }

    public let room: String
    public let peer: RelayPeer
    /// This relay opened the trunk (``Relay/openTrunk(room:to:)``), or accepted it.
    public let openedHere: Bool
    public let change: Change

    public var description: String {
        switch change {
        case .opened: return "trunk for \(room) \(openedHere ? "to" : "from") \(peer) opened"
        case let .ended(reason): return "trunk for \(room) \(openedHere ? "to" : "from") \(peer) ended: \(reason)"
        }
    }
}

/// Why a trunk ended (or never opened).
public enum TrunkEndReason: Sendable, Hashable, CustomStringConvertible {
    /// ``Relay/closeTrunk(room:to:)`` here.
    case closedHere
    /// The peer closed it: its room emptied, or it was asked to.
    case closedByPeer
    /// The room had no member here for the grace period (``TrunkTimings/emptyRoomGraceMilliseconds``).
    case roomEmptied
    /// Nothing authenticated arrived from the peer within ``TrunkTimings/timeoutMilliseconds``.
    /// A trunk opened here is opened again at once.
    case timedOut
    case shuttingDown
    case peerShuttingDown
    /// A newer handshake for the same room and peer took its place (the peer restarted, or
    /// both relays opened the trunk at once and the other one was kept).
    case replaced
    /// The opening got no answer: the peer is down or unreachable, or does not trust this
    /// relay's key (it answers an untrusted trunk with silence).
    case unanswered
    /// The peer presented another key than the one it was given with.
    case keyMismatch
    /// The peer answered no, saying why.
    case refused(String)
    /// The peer's key left this relay's trusted set (``Relay/setTrustedRelays(_:)``) and did
    /// not come back within ``TrunkTimings/distrustGraceMilliseconds``.
    case noLongerTrusted

    public var description: String {
        switch self {
        case .closedHere: return "closed here"
        case .closedByPeer: return "closed by the peer (its room emptied, or it was asked to)"
        case .roomEmptied: return "the room has no member here"
        case .timedOut: return "nothing heard from the peer; re-opening if this relay opened it"
        case .shuttingDown: return "this relay is shutting down"
        case .peerShuttingDown: return "the peer is shutting down"
        case .replaced: return "replaced by a newer trunk for the same room and peer"
        case .unanswered:
            return "no answer from the peer: check that it runs, that its address is right, and that its trusted set holds this relay's key"
        case .keyMismatch: return "the peer holds another key than the one given; check the cluster's record of it"
        case let .refused(why): return "refused by the peer: \(why)"
        case .noLongerTrusted: return "the peer is no longer among the relays this one trusts (gone from the cluster, or taken out of the trusted set)"
        }
    }
}

/// How a relay keeps its trunks alive and when it gives them up. Milliseconds, as people set them.
public struct TrunkTimings: Sendable, Hashable {
    /// Each side sends its receiver report (one block per stream it receives) this often; it
    /// is also the keepalive.
    public var keepaliveMilliseconds = 1_000
    /// A trunk that hears nothing for this long ends; one opened here is opened again.
    public var timeoutMilliseconds = 5_000
    /// A trunk closes once its room has had no member here for this long.
    public var emptyRoomGraceMilliseconds = 10_000
    /// Hellos and inits of an opening are sent again this often…
    public var openingRetransmitMilliseconds = 250
    /// …until the opening gives up.
    public var openingTimeoutMilliseconds = 5_000
    /// A trunk whose peer left the trusted set is closed once it has stayed out this long
    /// (longer than a cluster member takes to register again after its lease lapsed).
    public var distrustGraceMilliseconds = 10_000

    public init() {}

    var keepalive: UInt64 { UInt64(keepaliveMilliseconds) * 1_000_000 }
    var timeout: UInt64 { UInt64(timeoutMilliseconds) * 1_000_000 }
    var emptyRoomGrace: UInt64 { UInt64(emptyRoomGraceMilliseconds) * 1_000_000 }
    var openingRetransmit: UInt64 { UInt64(openingRetransmitMilliseconds) * 1_000_000 }
    var openingTimeout: UInt64 { UInt64(openingTimeoutMilliseconds) * 1_000_000 }
    var distrustGrace: UInt64 { UInt64(distrustGraceMilliseconds) * 1_000_000 }
}
