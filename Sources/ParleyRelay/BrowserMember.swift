import Crypto
import ParleyBasics
import ParleyWebRTC
import ParleyWire
import Synchronization

/// A person in a browser, from the offer its page posted to the end of its call: the
/// signalling's side of a browser member, shared by the web port (any thread) and the loop
/// whose socket receives its media (which makes its ``BrowserLeg``).
///
/// Made by ``Relay/acceptBrowserOffer(_:token:candidateHost:)`` once the token verified and the
/// offer was read; no DTLS state exists until an authentic ICE check and then a ClientHello
/// arrive from the browser.
///
/// What the relay tells the member (joined, rosters, texts, moderation answers, goodbye)
/// arrives here as the same control messages a `parley` client gets, through its transport
/// (``BrowserTransport/seal(_:into:nowNanoseconds:)``), and is kept as numbered
/// ``BrowserPageEvent``s (a bounded log, ``events(after:limit:)``) for the page's signalling
/// socket, which is woken as each arrives (``listen(_:)``) and sends them in order; a socket
/// that comes back after a break asks from the number it last saw. The page's requests (its
/// muted state, texts, moderation, leave) go to the loop as the control messages a `parley`
/// client sends (``submit(_:)``). The page's signalling is reliable (TCP), so the relay's
/// reliable messages count as acknowledged once they are here; their sequence numbers wait for
/// the loop's tick (``takeAcknowledgements()``).
public final class BrowserMember: Sendable {
    /// Names the member in the signalling's paths (the WHIP resource, its socket): 128 random
    /// bits. Not a secret: paths reach proxies' logs. What proves a request is the page's is
    /// the call's signalling key (``matchesSignallingKey(_:)``).
    public let id: String
    /// The call's signalling key (256 random bits), handed to the page in the offer's answer
    /// and never put in a path: whoever presents it is the page that posted the offer.
    public let signallingKey: String
    private let signallingKeyDigest: [UInt8]
    public let identity: String
    public let room: String
    /// The SSRC the browser's microphone sends with (from its offer).
    let ssrc: UInt32
    let canPublish: Bool
    let isModerator: Bool
    let capabilities: ControlMessage.Capabilities
    /// The page's X25519 identity public key (empty: it cannot take part in end-to-end
    /// encryption). The roster repeats it to the others, who seal their media keys to it.
    let identityKey: [UInt8]
    /// The token's `e2ee` claim: a room this member makes is end-to-end encrypted.
    let tokenAsksEndToEnd: Bool
    let token: String
    let iceUsernameFragment: String
    let responder: ICELiteResponder
    let transport: WebRTCAnswer.Transport
    let offer: WebRTCOffer
    /// Which slot (receiving section) each voice plays on at the browser; nil without slots.
    let receivers: BrowserReceivers?
    let allowRED: Bool
    let createdNanoseconds: UInt64

    private struct State {
        /// The latest events, oldest first, each numbered (``BrowserPageEvent/index``); the
        /// roster is not among them but kept apart, the latest only, so however many texts
        /// follow it a page that comes back is never left without one.
        var events: [BrowserPageEvent] = []
        var latestRoster: BrowserPageEvent?
        /// The number the next event gets.
        var nextIndex = 0
        /// The highest number dropped from `events` to keep it bounded (-1: none).
        var droppedThrough = -1
        /// The page's signalling socket, woken when an event arrives.
        var listener: (any BrowserPageListener)?
        var roster = RosterAssembler()
        var isEnded = false
        var leg: BrowserLeg?
        var loop: (any BrowserLoop)?
        /// Addresses an authentic ICE check came from: a DTLS ClientHello from one of these
        /// may make the leg (a browser checks a few candidate pairs).
        var checkedAddresses: [PeerAddress] = []
        /// Reliable messages handed over, for the loop to count as acknowledged.
        var acknowledgements: [UInt32] = []
        var delivered = RecentSequenceSet()
        var nextSequence: UInt32 = 1
        var stateRevision: UInt32 = 0
        /// The page's texts are numbered as a `parley` client numbers its own.
        var nextTextNumber: UInt32 = 1
    }

    private let state = Mutex(State())

    static let maximumQueuedEvents = 256
    static let maximumCheckedAddresses = 8

    init(id: String, signallingKey: String, token: AccessToken, tokenText: String, offer: WebRTCOffer, ssrc: UInt32, transport: WebRTCAnswer.Transport,
         allowRED: Bool, identityKey: [UInt8] = [], nowNanoseconds: UInt64) {
        self.id = id
        self.signallingKey = signallingKey
        signallingKeyDigest = Array(SHA256.hash(data: Array(signallingKey.utf8)))
        identity = token.identity
        room = token.room
        self.ssrc = ssrc
        canPublish = token.canPublish
        isModerator = token.isModerator
        // Texts: the page shows them, as a `parley` client does.
        var capabilities: ControlMessage.Capabilities = allowRED ? [.redundantAudio, .textMessages] : [.textMessages]
        // Its page seals and opens frames (SFrame in an RTCRtpScriptTransform) and keys (HPKE
        // on WebCrypto) as a `parley` client does, when it sent a key to take part with.
        if identityKey.count == ControlMessage.identityKeySize { capabilities.insert(.endToEndEncryption) }
        self.capabilities = capabilities
        self.identityKey = identityKey
        tokenAsksEndToEnd = token.endToEndEncrypted
        self.token = tokenText
        iceUsernameFragment = transport.iceUsernameFragment
        responder = ICELiteResponder(localUsernameFragment: transport.iceUsernameFragment, localPassword: transport.icePassword,
                                     remoteUsernameFragment: offer.iceUsernameFragment)
        self.transport = transport
        self.offer = offer
        receivers = BrowserReceivers(offer: offer)
        self.allowRED = allowRED
        createdNanoseconds = nowNanoseconds
    }

    // MARK: The page's side

    /// The SDP answer to the page's offer: its slots, each one other member's voice at a time
    /// with no SSRC named (``BrowserReceivers`` marks each copy with its slot's MID), and its
    /// sending section, which also receives the voices beyond its slots.
    public var answer: String {
        WebRTCAnswer.answer(offer, transport: transport, version: 1, allowRED: allowRED).text
    }

    /// Up to `limit` events numbered `index` or later, oldest first, and the number to ask from
    /// next time. If events from `index` on were dropped to keep the log bounded (a page away
    /// longer than the log lasts), a "missed" event comes first; the roster is always the latest.
    public func events(after index: Int, limit: Int = .max) -> (events: [BrowserPageEvent], next: Int) {
        state.withLock { state in
            var found = state.events.filter { $0.index! >= index }
            if let roster = state.latestRoster, roster.index! >= index {
                found.insert(roster, at: found.firstIndex { $0.index! > roster.index! } ?? found.endIndex)
            }
            if found.count > limit { found.removeLast(found.count - limit) }
            let next = found.last.map { $0.index! + 1 } ?? max(index, state.nextIndex)
            if index <= state.droppedThrough {
                found.insert(BrowserPageEvent(kind: "missed", text: "some of the room's messages could not be kept while this page was away"), at: 0)
            }
            return (found, next)
        }
    }

    /// Whether `presented` is the call's signalling key, in time that does not depend on where
    /// they differ (both are hashed first, so neither does it depend on the length).
    public func matchesSignallingKey(_ presented: some StringProtocol) -> Bool {
        Self.sameDigest(signallingKeyDigest, Array(SHA256.hash(data: Array(presented.utf8))))
    }

    /// Whether `presented` is the token the member joined with, compared as the key is.
    public func matchesToken(_ presented: some StringProtocol) -> Bool {
        Self.sameDigest(Array(SHA256.hash(data: Array(token.utf8))), Array(SHA256.hash(data: Array(presented.utf8))))
    }

    private static func sameDigest(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }

    /// The page's signalling socket: woken from now on when an event arrives. One at a time: a
    /// newer socket of the page (it came back after a break) replaces the older, which is told.
    public func listen(_ listener: any BrowserPageListener) {
        let previous = state.withLock { state in
            defer { state.listener = listener }
            return state.listener
        }
        if let previous, previous !== listener { previous.replaced() }
    }

    /// The socket closed: nothing more is woken (the call goes on; the log keeps what arrives).
    public func stopListening(_ listener: any BrowserPageListener) {
        state.withLock { state in
            if state.listener === listener { state.listener = nil }
        }
    }

    /// Whether the call is over (the last event says why).
    public var isEnded: Bool { state.withLock { $0.isEnded } }

    /// What the page says, as a `parley` client's control message would: its muted/deafened
    /// state, a text, or leaving. Before its leg exists there is no one to tell: false.
    @discardableResult
    public func submit(_ body: ControlMessage.Body) -> Bool {
        let target = state.withLock { state -> (BrowserLeg, any BrowserLoop, UInt32)? in
            guard let leg = state.leg, let loop = state.loop, !state.isEnded else { return nil }
            defer { state.nextSequence &+= 1 }
            return (leg, loop, state.nextSequence)
        }
        guard let target else { return false }
        target.1.pageSaid(ControlMessage(sequence: target.2, isReliable: true, body: body), leg: target.0)
        return true
    }

    // MARK: The relay's side

    /// A control message the relay sent the member (from its transport, on whichever loop sent it).
    func deliver(controlBytes: UnsafeRawBufferPointer) {
        guard let message = try? ControlMessage(parsing: controlBytes) else { return }
        let event: BrowserPageEvent?
        let isNew = state.withLock { state -> Bool in
            if message.isReliable {
                state.acknowledgements.append(message.sequence)
                return state.delivered.insert(message.sequence)
            }
            return true
        }
        guard isNew else { return }
        switch message.body {
        case let .joined(joined):
            event = BrowserPageEvent(kind: "joined", identity: joined.identity, room: joined.room, moderator: isModerator)
        case let .roster(page):
            let members = state.withLock { $0.roster.add(page) }
            guard let members else { return }
            receivers?.rosterChanged(Set(members.map(\.ssrc)))
            event = BrowserPageEvent(kind: "roster", roster: members.map {
                BrowserPageEvent.RosterEntry(
                    identity: $0.identity, ssrc: $0.ssrc, state: $0.state.summary, serverMuted: $0.isServerMuted,
                    identityKey: $0.identityKey.isEmpty ? nil : Base64URL.encode($0.identityKey),
                    e2ee: $0.capabilities.contains(.endToEndEncryption) && $0.identityKey.count == ControlMessage.identityKeySize)
            })
        case let .mediaKeys(keys):
            // Sealed to this member's identity key by each sender (HPKE): the page opens them.
            // Each entry names its sender, as the relay's routing wrote it.
            event = BrowserPageEvent(kind: "mediaKeys", keys: keys.entries.map { .init(ssrc: $0.ssrc, package: Base64URL.encode($0.package)) })
        case let .text(text):
            event = BrowserPageEvent(kind: "text", identity: text.sender, text: text.text)
        case let .error(error):
            event = BrowserPageEvent(kind: "error", text: error.message)
        case let .moderationReply(reply):
            // Done is news for the moderator; anything else is a problem to show as one.
            event = BrowserPageEvent(kind: reply.outcome == .done ? "moderated" : "notice", text: reply.message)
        case let .goodbye(goodbye):
            event = BrowserPageEvent(kind: "ended", text: goodbye.message.isEmpty ? "the relay ended the call" : goodbye.message)
        default:
            event = nil
        }
        if let event { append(event) }
    }

    func append(_ event: BrowserPageEvent) {
        let listener = state.withLock { state -> (any BrowserPageListener)? in
            guard !state.isEnded else { return nil }
            if event.kind == "ended" { state.isEnded = true }
            var numbered = event
            numbered.index = state.nextIndex
            state.nextIndex += 1
            if event.kind == "roster" {
                state.latestRoster = numbered
            } else {
                state.events.append(numbered)
                if state.events.count > Self.maximumQueuedEvents {
                    state.droppedThrough = state.events.removeFirst().index!
                }
            }
            return state.listener
        }
        listener?.eventsArrived()
    }

    /// The call will not be (or is no longer): the page is told why, once, and the member lets
    /// go of its leg. The leg and its transport hold the member, so keeping the leg would keep
    /// both alive, with the DTLS connection and SRTP contexts, as long as the page is held.
    func end(_ reason: String) {
        append(BrowserPageEvent(kind: "ended", text: reason))
        state.withLock { state in
            state.leg = nil
            state.loop = nil
        }
    }

    /// Sequence numbers of reliable messages handed to the page since the last call.
    func takeAcknowledgements() -> [UInt32] {
        state.withLock { state in
            defer { state.acknowledgements = [] }
            return state.acknowledgements
        }
    }

    /// An authentic ICE check came from `peer`.
    func noteCheck(from peer: PeerAddress) {
        state.withLock { state in
            guard !state.checkedAddresses.contains(peer), state.checkedAddresses.count < Self.maximumCheckedAddresses else { return }
            state.checkedAddresses.append(peer)
        }
    }

    func wasChecked(from peer: PeerAddress) -> Bool { state.withLock { $0.checkedAddresses.contains(peer) } }

    /// The loop made the member's leg; false if it already has one (a second ClientHello from
    /// another of its addresses) or the call is over.
    func bind(_ leg: BrowserLeg, loop: any BrowserLoop) -> Bool {
        state.withLock { state in
            guard state.leg == nil, !state.isEnded else { return false }
            state.leg = leg
            state.loop = loop
            return true
        }
    }

    var hasLeg: Bool { state.withLock { $0.leg != nil } }

    /// The member's leg while its call lasts (tests).
    var leg: BrowserLeg? { state.withLock { $0.leg } }

    /// The page's mute button (and deafen): the room's rosters show it, as a `parley` member's.
    @discardableResult
    public func setState(muted: Bool, deafened: Bool) -> Bool {
        let revision = state.withLock { state -> UInt32 in
            state.stateRevision &+= 1
            return state.stateRevision
        }
        var memberState: ControlMessage.MemberState = []
        if muted { memberState.insert(.muted) }
        if deafened { memberState.insert(.deafened) }
        return submit(.memberState(ControlMessage.MemberStateUpdate(revision: revision, state: memberState)))
    }

    /// A text the person typed, for everyone else in the room, as `parley`'s `say`: nil once it
    /// went to the relay, else why it cannot go, in words for the person. The relay applies the
    /// same rule and its rate, and answers a refusal with an error the page shows.
    public func say(_ text: String) -> String? {
        if let problem = ControlMessage.Text.problem(with: text) { return problem }
        let number = state.withLock { state -> UInt32 in
            defer { state.nextTextNumber &+= 1 }
            return state.nextTextNumber
        }
        return submit(.text(ControlMessage.Text(number: number, text: text))) ? nil : "the call is not connected yet"
    }

    /// A moderator's request from the page (server-mute, unmute, kick), as `parley ctl` sends
    /// it: the relay decides from the member's token whether it may, and answers with a
    /// "moderated" or "notice" event. The target and reason come from the page's JSON, not the
    /// wire, so they are held here to what the wire allows a `parley` client: a name that could
    /// be a member's, and a reason the relay's moderation takes.
    public func moderate(_ action: ControlMessage.ModerationAction, target: String, reason: String = "") -> PageRequestOutcome {
        let request = ControlMessage.ModerationRequest(action: action, target: target, reason: reason)
        if let problem = ModerationCheck.problem(with: request) { return .refused(problem) }
        if let problem = ParleyNames.problem(withIdentity: target) { return .refused("nobody can be called that: \(problem)") }
        return submit(.moderate(request)) ? .sent : .notConnected
    }

    /// What became of a request from the page.
    public enum PageRequestOutcome: Sendable, Equatable {
        /// On its way to the relay, which answers with an event.
        case sent
        /// Before the call is connected, or after it ended.
        case notConnected
        /// Not sent, and why, in words for the person.
        case refused(String)
    }

    /// Sealed media keys from the page for others of its room (end-to-end encrypted rooms),
    /// each entry naming its recipient's SSRC, in base64url as the page's JSON carries them:
    /// held to what a `parley` member's message may hold (each package 1 to 256 bytes, at most
    /// ``maximumMediaKeysPerRequest``), then sent on as messages of at most 8 entries, which
    /// the relay acknowledges, limits (``MemberLeg/mediaKeyRate``) and routes unread, as a
    /// `parley` member's. The relay cannot open them: they are sealed to the recipients.
    public func sendMediaKeys(_ entries: [(ssrc: UInt32, package: String)]) -> PageRequestOutcome {
        guard identityKey.count == ControlMessage.identityKeySize else {
            return .refused("this page joined without an identity key, so it takes no part in end-to-end encryption")
        }
        guard !entries.isEmpty, entries.count <= Self.maximumMediaKeysPerRequest else {
            return .refused("send 1 to \(Self.maximumMediaKeysPerRequest) media keys in one request")
        }
        var decoded: [ControlMessage.MediaKeys.Entry] = []
        decoded.reserveCapacity(entries.count)
        for entry in entries {
            // Base64url of 256 bytes is 342 characters: a longer string is refused unread.
            guard entry.package.utf8.count <= 344, let package = Base64URL.decode(entry.package), !package.isEmpty,
                  package.count <= ControlMessage.MediaKeys.maximumPackageSize else {
                return .refused("a sealed media key is 1 to \(ControlMessage.MediaKeys.maximumPackageSize) bytes in base64url")
            }
            decoded.append(.init(ssrc: entry.ssrc, package: package))
        }
        for start in stride(from: 0, to: decoded.count, by: ControlMessage.MediaKeys.maximumEntries) {
            let chunk = Array(decoded[start..<min(start + ControlMessage.MediaKeys.maximumEntries, decoded.count)])
            if !submit(.mediaKeys(ControlMessage.MediaKeys(entries: chunk))) { return .notConnected }
        }
        return .sent
    }

    /// Media keys in one request from the page: a rotation in a room of 33 in one request.
    public static let maximumMediaKeysPerRequest = 32

    /// The page closed the call (its DELETE, as WHIP ends a session).
    public func leave() {
        if !submit(.leave(ControlMessage.Leave())) { end("you left the call") }
    }
}

/// What the page is told, as JSON.
public struct BrowserPageEvent: Sendable, Hashable, Encodable {
    public struct RosterEntry: Sendable, Hashable, Encodable {
        public var identity: String
        public var ssrc: UInt32
        /// "live", "muted" or "deafened".
        public var state: String
        public var serverMuted: Bool
        /// The member's identity key (base64url), when it has one: what the page pins, shows
        /// the fingerprint and safety number of, and seals its media key to.
        public var identityKey: String?
        /// The member takes part in end-to-end encryption (its join said so, with a key).
        public var e2ee: Bool?
    }

    /// One sealed media key: from the relay, its sender's SSRC; the page opens it.
    public struct MediaKeyEntry: Sendable, Hashable, Encodable {
        public var ssrc: UInt32
        public var package: String
    }

    /// "joined", "connected", "roster", "text", "error", "notice" (a moderation request
    /// refused), "moderated" (one done), "mediaKeys" (sealed keys for the page), "ended", or
    /// "missed" (events dropped while the page was away).
    public var kind: String
    /// Its number among the member's events, which a page that comes back asks from; none on
    /// "missed".
    public var index: Int?
    public var identity: String?
    public var room: String?
    public var text: String?
    public var roster: [RosterEntry]?
    /// With "joined": whether the token makes the member a moderator, so the page offers the
    /// moderation buttons. The relay checks every request itself.
    public var moderator: Bool?
    /// With "joined": the room is end-to-end encrypted, so the page seals every frame and sends
    /// nothing until it has a key.
    public var e2ee: Bool?
    public var keys: [MediaKeyEntry]?

    init(kind: String, identity: String? = nil, room: String? = nil, text: String? = nil, roster: [RosterEntry]? = nil, moderator: Bool? = nil,
         e2ee: Bool? = nil, keys: [MediaKeyEntry]? = nil) {
        self.kind = kind
        self.e2ee = e2ee
        self.keys = keys
        self.identity = identity
        self.room = room
        self.text = text
        self.roster = roster
        self.moderator = moderator
    }
}

/// The page's signalling socket, as the member sees it. Called on whichever thread appended
/// the event or opened the newer socket: hand it on, do not block.
public protocol BrowserPageListener: AnyObject, Sendable {
    /// Events arrived: ask ``BrowserMember/events(after:limit:)`` for them.
    func eventsArrived()
    /// Another socket of the page took over from this one.
    func replaced()
}

/// What a browser member's page asks of the loop its leg lives on, from any thread; carried
/// out later on that loop.
protocol BrowserLoop: AnyObject, Sendable {
    func pageSaid(_ message: ControlMessage, leg: BrowserLeg)
}
