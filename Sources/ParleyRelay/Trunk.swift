import ParleyWire

/// One room's trunk to another relay of that room, at this end: towards this relay it acts
/// like one member that publishes every stream of the peer's members and receives every
/// stream of the members here, so each stream crosses it once however many listen behind it.
///
/// Like a ``Session``, a trunk lives on one event loop: the loop whose socket receives the
/// peer relay's datagrams (SO_REUSEPORT keeps one source on one socket, and all of a peer's
/// trunks share its address, so they share a loop). Everything mutable here is touched only
/// on that loop; the `let`s are written before the trunk is shared.
final class Trunk: @unchecked Sendable {
    enum State: Sendable, Hashable { case open, closed }

    /// From the sessions' ID space, so a trunk can stand in a room snapshot beside members.
    let id: UInt64
    let room: String
    let peer: RelayPeer
    let destination: DatagramAddress
    let peerAddress: PeerAddress
    /// The index the peer writes in sealed packets to us: with the address, it names the trunk.
    let localIndex: UInt32
    let protector: PacketProtector
    /// This relay opened the trunk (it re-opens it if the peer goes quiet).
    let openedHere: Bool
    let workerIndex: Int
    /// The handshake that made it (a retransmitted trunk init gets the same response).
    let ephemeralKey: [UInt8]
    let handshakeResponse: [UInt8]

    @exclusivity(unchecked) var state: State = .open
    @exclusivity(unchecked) var lastHeardNanoseconds: UInt64
    let openedNanoseconds: UInt64
    /// Who hears a stream arriving over the trunk: the room's members here (trunks skipped).
    @exclusivity(unchecked) var forwarding: RoomSnapshot = .empty
    /// The peer's publishing members' streams, by SSRC, from the peer's roster.
    @exclusivity(unchecked) var streams: [UInt32: TrunkStream] = [:]
    /// The peer's members as its last complete roster told them.
    var remoteRoster = RosterAssembler()
    var remoteMemberCount = 0
    /// The roster of the members here, sent to the peer reliably.
    var reliable = ReliableSender()
    var lastSentRoster: [ControlMessage.Roster.Member]?
    var lastSentRosterVersion: UInt32 = 0
    /// Sequences of the last roster's pages not yet acknowledged: while any is, the roster is
    /// sent again whenever the reliable sender has given it up, for as long as the trunk lives.
    var unacknowledgedRosterPages: Set<UInt32> = []
    /// Texts and moderations from the peer already acted on (one sent again because its
    /// acknowledgement was lost is acknowledged again, not acted on twice).
    var receivedReliable = RecentSequenceSet()
    /// Texts for the members behind the trunk, sent one at a time (so they arrive in the order
    /// written), the next when the peer acknowledged the last; at most
    /// ``maximumQueuedTexts``, beyond which the newest is dropped and counted, as a member's
    /// full queue is.
    var queuedTexts: [(sender: String, text: String)] = []
    static let maximumQueuedTexts = 64
    /// Moderations passed on and not yet acknowledged, at most (a trusted relay's moderators
    /// are rate-limited at their own relay; this bounds the memory a stuck trunk holds).
    static let maximumModerationsInFlight = 64
    /// Its room was closed here: it ends once nothing it passed on awaits an acknowledgement.
    var endsWhenSettled = false
    private var nextSequence: UInt32 = 1
    /// Members here as of the last room update, and since when there were none.
    var localMemberCount = 0
    var emptySinceNanoseconds: UInt64?
    var nextReportNanoseconds: UInt64 = 0
    /// RTCP and control from the peer: a generous budget (one report per stream a second,
    /// and rosters), so even a faulty peer cannot take the loop's time.
    var rtcpAndControlRate: TokenBucket

    init(
        id: UInt64, room: String, peer: RelayPeer, destination: DatagramAddress, peerAddress: PeerAddress, localIndex: UInt32,
        protector: PacketProtector, openedHere: Bool, workerIndex: Int, ephemeralKey: [UInt8], handshakeResponse: [UInt8],
        limits: RelayLimits, nowNanoseconds: UInt64
    ) {
        self.id = id
        self.room = room
        self.peer = peer
        self.destination = destination
        self.peerAddress = peerAddress
        self.localIndex = localIndex
        self.protector = protector
        self.openedHere = openedHere
        self.workerIndex = workerIndex
        self.ephemeralKey = ephemeralKey
        self.handshakeResponse = handshakeResponse
        lastHeardNanoseconds = nowNanoseconds
        openedNanoseconds = nowNanoseconds
        let rate = limits.controlPacketsPerSecondPerMember * 16
        rtcpAndControlRate = TokenBucket(ratePerSecond: rate, burst: rate, nowNanoseconds: nowNanoseconds)
    }

    func takeSequence() -> UInt32 {
        defer { nextSequence &+= 1 }
        return nextSequence
    }

    var route: TrunkRoute { TrunkRoute(peer: peerAddress, index: localIndex) }

    /// How the trunk stands in the room's snapshot: one receiver for all the peer's members.
    var receiver: RoomSnapshot.Receiver {
        RoomSnapshot.Receiver(
            sessionID: id, destination: destination, protector: protector, ssrc: 0, listenerLoss: Self.unusedBoard, isTrunk: true)
    }

    /// The peer's streams, for the members here to report their loss against.
    var remoteStreams: [RoomSnapshot.RemoteStream] {
        streams.map { RoomSnapshot.RemoteStream(ssrc: $0.key, listenerLoss: $0.value.listenerLoss) }
    }

    /// Replaces the peer's streams with those of `members` who may publish, keeping the state
    /// of streams that stay, so their statistics and loss reports go on.
    func setRemoteMembers(_ members: [ControlMessage.Roster.Member], limits: RelayLimits, now: UInt64) {
        var next: [UInt32: TrunkStream] = [:]
        for member in members where member.canPublish {
            next[member.ssrc] = streams[member.ssrc] ?? TrunkStream(ssrc: member.ssrc, limits: limits, nowNanoseconds: now)
        }
        streams = next
        remoteMemberCount = members.count
    }

    var logDescription: String { "trunk \(room) \(openedHere ? "to" : "from") \(peer)" }

    /// A trunk is never reported about by SSRC (``RoomSnapshot/listenerLoss(of:reportedBy:)``
    /// skips trunks); its receiver entry still needs a board.
    private static let unusedBoard = ListenerLossBoard()
}

/// One stream of a member behind a trunk: its rates and reception statistics on the trunk's
/// leg, and what the members here report losing of it.
final class TrunkStream: @unchecked Sendable {
    @exclusivity(unchecked) var media: MediaAdmission.Sender
    let listenerLoss = ListenerLossBoard()
    var nextSenderReportForwardNanoseconds: UInt64 = 0

    init(ssrc: UInt32, limits: RelayLimits, nowNanoseconds: UInt64) {
        media = MediaAdmission.Sender(ssrc: ssrc, canPublish: true, limits: limits, nowNanoseconds: nowNanoseconds)
    }
}

/// A trunk's name on its loop: every trunk to one peer shares the peer's address, and the
/// receiver index of its sealed packets tells them apart.
struct TrunkRoute: Hashable, Sendable {
    let peer: PeerAddress
    let index: UInt32
}
