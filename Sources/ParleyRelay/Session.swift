import NIOCore
import ParleyWire

/// One member's transport state at the relay: where it is, what it sends, what it was told.
///
/// A session lives on one event loop, the loop whose socket receives its datagrams
/// (SO_REUSEPORT steers a source address to one socket). Everything mutable here is touched
/// only on that loop; other loops reach it through `RelayLoop.execute`. The `let`s are
/// written once, before the session is shared.
final class Session: @unchecked Sendable {
    enum State: Sendable, Hashable {
        /// Joined; has not yet proven it receives at its address.
        case joining
        case active
        case closed
    }

    let id: UInt64
    /// Where its datagrams come from and go, as the kernel writes and takes it.
    let address: DatagramAddress
    let peer: PeerAddress
    let room: String
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
    /// The token the session joined with, to recognise a retransmitted join.
    let token: String
    /// Index of the worker (event loop) that owns the session.
    let workerIndex: Int
    /// A browser member's transport (ICE-lite, DTLS, SRTP, its page's signalling); nil for a
    /// `parley` member, whose hop is sealed by ``protector`` alone.
    let browser: BrowserTransport?
    /// The member's hop keys (plaintext on an `--insecure` relay). Set once, before the
    /// session is admitted and shared with other loops.
    private(set) var protector: PacketProtector = .plaintext
    /// The handshake that made the session, so a retransmitted init (same ephemeral key, same
    /// address) gets the same response instead of a second session.
    private(set) var handshake: (ephemeralKey: [UInt8], response: [UInt8])?

    // MARK: Loop-confined state (one thread, never re-entrant: no dynamic exclusivity checks)

    @exclusivity(unchecked) var state: State = .joining
    @exclusivity(unchecked) var lastHeardNanoseconds: UInt64
    let joinedNanoseconds: UInt64
    /// The `joined` answer, kept so a retransmitted join gets the very same bytes.
    var joinedMessage: [UInt8] = []
    @exclusivity(unchecked) var forwarding: RoomSnapshot = .empty
    /// The room version of the last roster sent to the member.
    var rosterVersion: UInt32?
    var reliable = ReliableSender()
    private var nextSequence: UInt32 = 1
    /// Media rate limits and reception statistics, what ``MediaAdmission`` reads and keeps.
    @exclusivity(unchecked) var media: MediaAdmission.Sender
    /// RTCP and control packets: a budget of their own, so acknowledgements never cost audio.
    var rtcpAndControlRate: TokenBucket
    /// When the member's next sender report may be forwarded to the others.
    var nextSenderReportForwardNanoseconds: UInt64 = 0
    /// When the relay's next receiver report to this member is due (0: at the next tick).
    var nextReceiverReportNanoseconds: UInt64 = 0
    /// Per-stream gauges, registered when the member becomes active, removed when it leaves.
    var gauges: StreamGauges?
    /// What the listeners of this member's stream report losing of it.
    let listenerLoss = ListenerLossBoard()
    /// Muted, deafened: what the member says and what its room has been told.
    var memberState: MemberStatePacer
    /// Text messages from the member and to it.
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
    /// Sequence numbers of the media-key messages already relayed, so a retransmission is not.
    var receivedMediaKeys = RecentSequenceSet()
    /// Sealed keys for the member not yet sent: each entry names its sender.
    var pendingMediaKeys: [ControlMessage.MediaKeys.Entry] = []
    /// Sealed keys waiting for the member at most, sent or not: a rotation of the largest
    /// room, and a few more.
    static let maximumMediaKeysInFlight = 1_024

    init(
        id: UInt64, address: DatagramAddress, peer: PeerAddress, room: String, identity: String, ssrc: UInt32,
        canPublish: Bool, isModerator: Bool = false, capabilities: ControlMessage.Capabilities = [], identityKey: [UInt8] = [],
        isEndToEndEncrypted: Bool = false, cookie: UInt64, token: String, workerIndex: Int, limits: RelayLimits, nowNanoseconds: UInt64,
        browser: BrowserTransport? = nil
    ) {
        self.browser = browser
        self.identityKey = identityKey
        self.isEndToEndEncrypted = isEndToEndEncrypted
        self.id = id
        self.address = address
        self.peer = peer
        self.room = room
        self.identity = identity
        self.ssrc = ssrc
        self.canPublish = canPublish
        self.isModerator = isModerator
        self.capabilities = capabilities
        self.cookie = cookie
        self.token = token
        self.workerIndex = workerIndex
        self.lastHeardNanoseconds = nowNanoseconds
        self.joinedNanoseconds = nowNanoseconds
        self.media = MediaAdmission.Sender(ssrc: ssrc, canPublish: canPublish, limits: limits, nowNanoseconds: nowNanoseconds)
        self.memberState = MemberStatePacer(nowNanoseconds: nowNanoseconds)
        self.texts = MemberTexts(nowNanoseconds: nowNanoseconds)
        self.rtcpAndControlRate = TokenBucket(ratePerSecond: limits.controlPacketsPerSecondPerMember, burst: limits.controlPacketsPerSecondPerMember,
                                       nowNanoseconds: nowNanoseconds)
        self.moderationRate = TokenBucket(ratePerSecond: 5, burst: 10, nowNanoseconds: nowNanoseconds)
        self.mediaKeyRate = TokenBucket(ratePerSecond: Self.mediaKeysPerSecond, burst: Self.mediaKeyBurst, nowNanoseconds: nowNanoseconds)
    }

    /// Sealed media keys the member may send through the relay: a rotation sends one to each
    /// other member (the burst covers the largest room's), a churning room a few a second.
    static let mediaKeysPerSecond = 200
    static let mediaKeyBurst = 1_000

    /// Attaches the keys agreed in the member's handshake; before the session is admitted only.
    func secure(with protector: PacketProtector, ephemeralKey: [UInt8], response: [UInt8]) {
        self.protector = protector
        self.handshake = (ephemeralKey, response)
    }

    /// Attaches a browser member's SRTP once its DTLS handshake is done; before the session is
    /// active (and so in any receiver list) only.
    func secure(browser protection: BrowserProtection) {
        protector = PacketProtector(browser: protection)
    }

    func takeSequence() -> UInt32 {
        defer { nextSequence &+= 1 }
        return nextSequence
    }

    var receiver: RoomSnapshot.Receiver {
        RoomSnapshot.Receiver(sessionID: id, destination: address, protector: protector, ssrc: ssrc, listenerLoss: listenerLoss)
    }

    var logDescription: String { "\(identity)@\(room) from \(peer) ssrc \(ssrc)" }
}
