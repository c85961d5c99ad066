import ParleyDatagrams
import ParleyWire

/// A member's leg: one person's client, its one stream, and what its token and join say.
/// A browser member is one too (``BrowserLeg``): the same member, over DTLS-SRTP.
/// Everything a leg has is in ``Leg``; this adds what only a member has: an identity, the
/// join's answer, its state and texts as the room hears them, moderation and key budgets.
class MemberLeg: Leg, @unchecked Sendable {
    let identity: String
    let ssrc: UInt32
    let canPublish: Bool
    /// The token's `mod` claim: the member may server-mute, kick and close its room.
    let isModerator: Bool
    /// What the member can receive, from its join; the roster tells the others.
    let capabilities: ControlMessage.Capabilities
    /// The member's identity key from its join (empty: none), which the roster repeats so
    /// others can seal media keys to it. The relay never holds a media key.
    let identityKey: [UInt8]
    /// Its room is end-to-end encrypted, as decided when it joined (and told in `joined`).
    let isEndToEndEncrypted: Bool
    let cookie: UInt64
    /// The token the member joined with, to recognise a retransmitted join.
    let token: String
    let joinedNanoseconds: UInt64
    /// The handshake that made the leg, so a retransmitted init (same ephemeral key, same
    /// address) gets the same response instead of a second leg.
    private(set) var handshake: (ephemeralKey: [UInt8], response: [UInt8])?
    /// The `joined` answer, kept so a retransmitted join gets the very same bytes.
    var joinedMessage: [UInt8] = []

    /// The member's stream: its rates, reception statistics and listeners' loss.
    let stream: LegStream
    /// Muted, deafened: what the member says and what its room has been told.
    var memberState: MemberStatePacer
    /// The texts the member sends, each acted on once, within its rate.
    var texts: MemberTexts
    /// The last moderation request answered and the answer's bytes: a repeat of the request
    /// (its answer was lost) gets the same answer, not a second action.
    var lastModeration: (sequence: UInt32, answer: [UInt8])?
    /// Moderation requests are few; each takes the rooms' lock, so they are limited apart
    /// from the control rate.
    var moderationRate: TokenBucket
    /// Entries of sealed media keys the member sends to others (each is delivered, and may
    /// cross a trunk): limited apart from the control rate, which counts messages.
    var mediaKeyRate: TokenBucket

    /// Sealed media keys the member may send through the relay: a rotation sends one to each
    /// other member (the burst covers the largest room's), a churning room a few a second.
    static let mediaKeysPerSecond = 200
    static let mediaKeyBurst = 1_000

    init(
        id: UInt64, address: DatagramAddress, peer: PeerAddress, room: String, identity: String, ssrc: UInt32,
        canPublish: Bool, isModerator: Bool = false, capabilities: ControlMessage.Capabilities = [], identityKey: [UInt8] = [],
        isEndToEndEncrypted: Bool = false, cookie: UInt64, token: String, workerIndex: Int, limits: RelayLimits, nowNanoseconds: UInt64
    ) {
        self.identity = identity
        self.ssrc = ssrc
        self.canPublish = canPublish
        self.isModerator = isModerator
        self.capabilities = capabilities
        self.identityKey = identityKey
        self.isEndToEndEncrypted = isEndToEndEncrypted
        self.cookie = cookie
        self.token = token
        joinedNanoseconds = nowNanoseconds
        stream = LegStream(ssrc: ssrc, canPublish: canPublish, limits: limits, nowNanoseconds: nowNanoseconds)
        memberState = MemberStatePacer(nowNanoseconds: nowNanoseconds)
        texts = MemberTexts(nowNanoseconds: nowNanoseconds)
        moderationRate = TokenBucket(ratePerSecond: 5, burst: 10, nowNanoseconds: nowNanoseconds)
        mediaKeyRate = TokenBucket(ratePerSecond: Self.mediaKeysPerSecond, burst: Self.mediaKeyBurst, nowNanoseconds: nowNanoseconds)
        super.init(id: id, room: room, destination: address, peer: peer, workerIndex: workerIndex, transport: PlaintextTransport.shared,
                   state: .joining, controlPacketsPerSecond: limits.controlPacketsPerSecondPerMember, nowNanoseconds: nowNanoseconds)
    }

    /// Attaches the keys agreed in the member's handshake; before the leg is admitted only.
    func secure(with transport: any LegTransport, ephemeralKey: [UInt8], response: [UInt8]) {
        secure(with: transport)
        handshake = (ephemeralKey, response)
    }

    override func stream(for ssrc: UInt32) -> LegStream? { ssrc == self.ssrc ? stream : nil }

    override func streamToAdmit(ssrc: UInt32) -> LegStream? { stream }

    override func forEachStream(_ body: (LegStream) -> Void) { body(stream) }

    override func roomChanged(_ snapshot: RoomSnapshot, now: UInt64) {
        stream.media.isServerMuted = snapshot.serverMuted.contains(id)
    }

    override var forwardsToTrunks: Bool { true }

    override var receiver: RoomSnapshot.Receiver {
        RoomSnapshot.Receiver(legID: id, destination: destination, transport: transport, ssrc: ssrc, listenerLoss: stream.listenerLoss)
    }

    override var reportWeight: Int { 1 }

    override func reports(as ssrc: UInt32) -> Bool { ssrc == self.ssrc }

    override var logDescription: String { "\(identity)@\(room) from \(peer) ssrc \(ssrc)" }

    /// Whether ``Departures`` keeps the member's address and transport for a while after it
    /// left, to retransmit its goodbye and acknowledge a retransmitted leave.
    var isRememberedAfterLeaving: Bool { true }
}
