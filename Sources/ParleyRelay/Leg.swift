import ParleyDatagrams
import ParleyWire

/// Whatever the relay forwards to and from: a `parley` member (``MemberLeg``) or a trunk to
/// another relay of the room (``TrunkLeg``), and whatever kind comes next (a browser member
/// is a member leg whose ``LegTransport`` is DTLS-SRTP). This is the relay's central picture:
///
/// ```
///              datagram ─▶ transport.open ─▶ media ─▶ admitted by its stream ─▶ a copy to each
///   leg ──────────────────────────────────▶ RTCP ─▶ terminated (LegRTCP)        receiver of the
///    │                                  └─▶ control ─▶ acks, texts, keys,       leg's snapshot,
///    │                                                 moderation, rosters      sealed by each
///    └◀──── transport.seal ◀──────────────────────────────────────────────────  receiver's transport
/// ```
///
/// Every leg has a destination, a transport, a reliable control sender, rates, what it was
/// last told (roster, texts, sealed media keys) and a place in its room's ``RoomSnapshot``;
/// forwarding, RTCP termination, control, rosters and moderation are written once for all
/// legs (``LegHandler``). What a role decides is small and lives in the subclass: which
/// streams arrive over the leg, whether what it brings goes on to trunks (a member's does;
/// a trunk's goes to the members here only, so the relays of a room form a full mesh without
/// loops), and how many listeners its reports speak for. How a leg is admitted is its
/// handler's: a member's join (``MemberAdmission``), a trunk's handshake (``TrunkTable``).
///
/// A leg lives on one event loop, the loop whose socket receives its datagrams (SO_REUSEPORT
/// steers a source to one socket). Everything mutable is touched only on that loop, never
/// re-entrantly (so the hot fields skip the runtime's exclusivity checks); other loops reach
/// it through `DatagramLoop.execute`. The `let`s, and the transport, are written before it is
/// shared. A base class, as SwiftNIO's channels are: the per-packet path reads the common
/// fields directly and asks the role through one virtual call.
class Leg: @unchecked Sendable {
    enum State: Sendable, Hashable {
        /// Admitted; a member that has not yet proven it receives at its address.
        case joining
        case active
        case closed
    }

    /// From one ID space for every leg, so members and trunks stand side by side in a snapshot.
    let id: UInt64
    let room: String
    /// Where its datagrams come from and go, as the kernel writes and takes it.
    let destination: DatagramAddress
    let peer: PeerAddress
    /// The loop that owns it.
    let workerIndex: Int
    /// How its datagrams are opened and sealed; set once, before it is admitted and shared.
    private(set) var transport: any LegTransport

    @exclusivity(unchecked) var state: State
    @exclusivity(unchecked) var lastHeardNanoseconds: UInt64
    /// Its room as of the last update: who hears what arrives over the leg.
    @exclusivity(unchecked) var forwarding: RoomSnapshot = .empty
    /// RTCP and control from the leg: a budget of their own, so acknowledgements never cost audio.
    var controlRate: TokenBucket

    /// Reliable messages to the leg, until acknowledged or given up.
    var reliable = ReliableSender()
    private var nextSequence: UInt32 = 1
    /// Reliable messages from the leg already acted on: one sent again because its
    /// acknowledgement was lost is acknowledged again, not acted on twice.
    var receivedReliable = RecentSequenceSet()
    /// The room's texts for the leg, one in flight at a time.
    var textsOut = TextOutbox()
    /// Sealed media keys for the leg, gathered until the next tick (or a full message).
    var mediaKeysOut: [PendingMediaKey] = []
    /// The roster the leg was last sent.
    var rosterOut = RosterOutbox()
    /// Loss and jitter of a member's streams, for `/metrics`: from when it is active until it
    /// leaves (a trunk has none).
    var streamFigures: StreamFigures?
    /// When the relay's next receiver report to the leg is due on the forwarding path, with
    /// one of the leg's own packets (0: at the next; a trunk's goes with its keepalive instead).
    var nextReceiverReportNanoseconds: UInt64 = 0

    /// Sealed keys waiting for one leg at most, sent or not: a rotation of the largest room,
    /// and a few more.
    static let maximumMediaKeysInFlight = 1_024

    init(id: UInt64, room: String, destination: DatagramAddress, peer: PeerAddress, workerIndex: Int, transport: any LegTransport,
         state: State, controlPacketsPerSecond: Int, nowNanoseconds: UInt64) {
        self.id = id
        self.room = room
        self.destination = destination
        self.peer = peer
        self.workerIndex = workerIndex
        self.transport = transport
        self.state = state
        lastHeardNanoseconds = nowNanoseconds
        controlRate = TokenBucket(ratePerSecond: controlPacketsPerSecond, burst: controlPacketsPerSecond, nowNanoseconds: nowNanoseconds)
    }

    /// Attaches the transport its handshake agreed; before the leg is admitted only.
    func secure(with transport: any LegTransport) {
        self.transport = transport
    }

    func takeSequence() -> UInt32 {
        defer { nextSequence &+= 1 }
        return nextSequence
    }

    // MARK: What the role decides

    /// The stream of `ssrc` that arrives over this leg, if it brings one.
    func stream(for ssrc: UInt32) -> LegStream? { preconditionFailure("a leg is a member or a trunk") }

    /// The stream whose rates and statistics an RTP packet naming `ssrc` is admitted against:
    /// a member's one stream whatever the packet names (``MediaAdmission`` then refuses a
    /// foreign SSRC after the rates, as for any of its packets); over a trunk, the stream of
    /// that SSRC, if the peer announced it.
    func streamToAdmit(ssrc: UInt32) -> LegStream? { preconditionFailure("a leg is a member or a trunk") }

    /// The leg's room changed (its new snapshot is in ``forwarding``, or was older than it):
    /// what the role keeps of it.
    func roomChanged(_ snapshot: RoomSnapshot, now: UInt64) {}

    /// Calls `body` with every stream that arrives over this leg (the relay's receiver reports
    /// are about them).
    func forEachStream(_ body: (LegStream) -> Void) { preconditionFailure("a leg is a member or a trunk") }

    /// Whether what arrives over the leg goes on over the room's trunks too: a member's does;
    /// a trunk's goes to the members here only (the other relays of the room have trunks of
    /// their own to the sender's relay).
    var forwardsToTrunks: Bool { preconditionFailure("a leg is a member or a trunk") }

    /// How the leg stands in its room's snapshot.
    var receiver: RoomSnapshot.Receiver { preconditionFailure("a leg is a member or a trunk") }

    /// For how many listeners the leg's reception reports speak: a member for itself, a trunk
    /// for every member behind it.
    var reportWeight: Int { preconditionFailure("a leg is a member or a trunk") }

    /// Whether a sender or receiver report that names `ssrc` as its sender may come from this leg.
    func reports(as ssrc: UInt32) -> Bool { preconditionFailure("a leg is a member or a trunk") }

    /// For logs.
    var logDescription: String { preconditionFailure("a leg is a member or a trunk") }
}

/// One stream that arrives over a leg: a member's own, or one of a member behind a trunk. Its
/// rates and reception statistics on the leg (``MediaAdmission``), what its listeners report
/// losing of it, and when its sender report may next go on.
final class LegStream: @unchecked Sendable {
    @exclusivity(unchecked) var media: MediaAdmission.Sender
    let listenerLoss = ListenerLossBoard()
    var nextSenderReportForwardNanoseconds: UInt64 = 0

    init(ssrc: UInt32, canPublish: Bool, limits: RelayLimits, nowNanoseconds: UInt64) {
        media = MediaAdmission.Sender(ssrc: ssrc, canPublish: canPublish, limits: limits, nowNanoseconds: nowNanoseconds)
    }

    var ssrc: UInt32 { media.ssrc }
}
