import ParleyDatagrams
import ParleyWire

/// One room's trunk to another relay of that room, at this end: towards this relay it is one
/// leg that brings every stream of the peer's members and hears every stream of the members
/// here, so each stream crosses it once however many listen behind it. Everything a leg has
/// is in ``Leg``; this adds what only a trunk has: the peer relay, the streams and roster of
/// the members behind it, and how it stays open or ends.
///
/// All trunks to one peer share its address (and so its loop); the receiver index of its
/// sealed packets tells them apart (``TrunkRoute``).
final class TrunkLeg: Leg, @unchecked Sendable {
    let peerRelay: RelayPeer
    /// The index the peer writes in sealed packets to us: with the address, it names the trunk.
    let localIndex: UInt32
    /// This relay opened the trunk (it re-opens it if the peer goes quiet).
    let openedHere: Bool
    /// The handshake that made it (a retransmitted trunk init gets the same response).
    let ephemeralKey: [UInt8]
    let handshakeResponse: [UInt8]
    let openedNanoseconds: UInt64

    /// The peer's publishing members' streams, by SSRC, from the peer's roster.
    @exclusivity(unchecked) var streamsBySSRC: [UInt32: LegStream] = [:]
    /// The peer's members as its last complete roster told them.
    var remoteRoster = RosterAssembler()
    var remoteMemberCount = 0
    /// Its room was closed here: it ends once nothing it passed on awaits an acknowledgement.
    var endsWhenSettled = false
    /// Members here as of the last room update, and since when there were none.
    var localMemberCount = 0
    var emptySinceNanoseconds: UInt64?
    /// When its next receiver report (which is also its keepalive) is due.
    var nextReportNanoseconds: UInt64 = 0

    /// Moderations passed on and not yet acknowledged, at most (a trusted relay's moderators
    /// are rate-limited at their own relay; this bounds the memory a stuck trunk holds).
    static let maximumModerationsInFlight = 64

    init(
        id: UInt64, room: String, peer: RelayPeer, destination: DatagramAddress, peerAddress: PeerAddress, localIndex: UInt32,
        transport: any LegTransport, openedHere: Bool, workerIndex: Int, ephemeralKey: [UInt8], handshakeResponse: [UInt8],
        limits: RelayLimits, nowNanoseconds: UInt64
    ) {
        peerRelay = peer
        self.localIndex = localIndex
        self.openedHere = openedHere
        self.ephemeralKey = ephemeralKey
        self.handshakeResponse = handshakeResponse
        openedNanoseconds = nowNanoseconds
        // RTCP and control from the peer: a generous budget (one report per stream a second,
        // and rosters), so even a faulty peer cannot take the loop's time.
        super.init(id: id, room: room, destination: destination, peer: peerAddress, workerIndex: workerIndex, transport: transport,
                   state: .active, controlPacketsPerSecond: limits.controlPacketsPerSecondPerMember * 16, nowNanoseconds: nowNanoseconds)
        // Its receiver report is its keepalive, sent from the tick (``nextReportNanoseconds``).
        nextReceiverReportNanoseconds = .max
    }

    var route: TrunkRoute { TrunkRoute(peer: peer, index: localIndex) }

    override func stream(for ssrc: UInt32) -> LegStream? { streamsBySSRC[ssrc] }

    override func streamToAdmit(ssrc: UInt32) -> LegStream? { streamsBySSRC[ssrc] }

    override func roomChanged(_ snapshot: RoomSnapshot, now: UInt64) {
        localMemberCount = snapshot.localMemberCount
        if snapshot.localMemberCount > 0 {
            emptySinceNanoseconds = nil
        } else if emptySinceNanoseconds == nil {
            emptySinceNanoseconds = now
        }
    }

    override func forEachStream(_ body: (LegStream) -> Void) {
        for stream in streamsBySSRC.values { body(stream) }
    }

    override var forwardsToTrunks: Bool { false }

    /// One receiver for all the peer's members. A trunk is never reported about by SSRC
    /// (``RoomSnapshot/listenerLoss(of:reportedBy:)`` skips trunks); its entry still needs a board.
    override var receiver: RoomSnapshot.Receiver {
        RoomSnapshot.Receiver(legID: id, destination: destination, transport: transport, ssrc: 0, listenerLoss: Self.unusedBoard, isTrunk: true)
    }

    override var reportWeight: Int { remoteMemberCount }

    /// The peer relay reports as itself (its own random SSRC); its sender reports are checked
    /// against the streams it brings.
    override func reports(as ssrc: UInt32) -> Bool { true }

    override var logDescription: String { "trunk \(room) \(openedHere ? "to" : "from") \(peerRelay)" }

    /// The peer's streams, for the members here to report their loss against.
    var remoteStreams: [RoomSnapshot.RemoteStream] {
        streamsBySSRC.map { RoomSnapshot.RemoteStream(ssrc: $0.key, listenerLoss: $0.value.listenerLoss) }
    }

    /// Replaces the peer's streams with those of `members` who may publish, keeping the state
    /// of streams that stay, so their statistics and loss reports go on.
    func setRemoteMembers(_ members: [ControlMessage.Roster.Member], limits: RelayLimits, now: UInt64) {
        var next: [UInt32: LegStream] = [:]
        for member in members where member.canPublish {
            next[member.ssrc] = streamsBySSRC[member.ssrc] ?? LegStream(ssrc: member.ssrc, canPublish: true, limits: limits, nowNanoseconds: now)
        }
        streamsBySSRC = next
        remoteMemberCount = members.count
    }

    private static let unusedBoard = ListenerLossBoard()
}

/// A trunk's name on its loop: every trunk to one peer shares the peer's address, and the
/// receiver index of its sealed packets tells them apart.
struct TrunkRoute: Hashable, Sendable {
    let peer: PeerAddress
    let index: UInt32
}
