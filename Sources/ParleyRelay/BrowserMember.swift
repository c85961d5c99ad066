import ParleyWebRTC
import ParleyWire
import Synchronization

/// A person in a browser, from the offer it posted to the end of its call: the signalling's
/// side of a browser member, shared by the web server (its WebSocket) and the relay loop
/// whose socket receives its media.
///
/// Made by ``Relay/acceptBrowserOffer(_:)`` once the token verified and the offer was read;
/// no DTLS state exists yet. The loop makes the member's ``Session`` (a member like any
/// other, whose transport is ``BrowserTransport``) when a DTLS ClientHello arrives from an
/// address that already passed an authentic ICE check for this member's credentials.
///
/// What the relay tells the member (joined, rosters, texts, moderation answers, sealed media
/// keys, goodbye) arrives here as Parley control messages and goes to the page over its
/// WebSocket (``attach(_:)``), in order; what the page says goes to the loop as the same
/// control messages a `parley` client sends (``submit(_:)``). The WebSocket is reliable, so
/// the relay's reliable messages are acknowledged as soon as they are handed over.
public final class BrowserMember: Sendable {
    /// Names the member in the signalling's URLs (the WebSocket's, the WHIP resource's): 128
    /// random bits, known only to whoever posted the offer.
    public let id: String
    public let identity: String
    public let room: String
    /// The SSRC the browser's microphone sends with (from its offer).
    public let ssrc: UInt32
    public let canPublish: Bool
    public let isModerator: Bool
    public let isEndToEndEncrypted: Bool
    /// What the page takes part in (its roster entry says so to the others).
    let capabilities: ControlMessage.Capabilities
    /// The browser's identity key, in an end-to-end encrypted room.
    let identityKey: [UInt8]
    let token: String
    /// The relay's ICE credentials for this member, and the responder that checks them.
    let iceUsernameFragment: String
    let responder: ICELiteResponder
    let transport: WebRTCAnswer.Transport
    let firstOffer: WebRTCOffer
    let allowRED: Bool
    let createdNanoseconds: UInt64

    /// What a page is told.
    public enum Event: Sendable {
        /// A control message from the relay: joined, roster, text, error, goodbye, moderation
        /// reply, media keys, pong.
        case control(ControlMessage)
        /// DTLS is up: media flows both ways.
        case connected
        /// The relay will not have the member, or it is gone: why, in words.
        case ended(String)
    }

    private struct State {
        var sink: (@Sendable (Event) -> Void)?
        /// Events before the page's WebSocket attached (at most ``maximumQueuedEvents``).
        var queued: [Event] = []
        var isEnded = false
        /// Where the member's session lives, once made.
        var loop: (any BrowserLoop)?
        var session: Session?
        /// Addresses an authentic ICE check came from: a DTLS ClientHello from one of these may
        /// make the session (a browser checks a few candidate pairs).
        var checkedAddresses: [PeerAddress] = []
        var answerVersion: UInt64 = 1
        var nextSequence: UInt32 = 1
    }

    private let state = Mutex(State())

    static let maximumQueuedEvents = 256
    static let maximumCheckedAddresses = 8

    init(id: String, token: AccessToken, tokenText: String, ssrc: UInt32, isEndToEndEncrypted: Bool, capabilities: ControlMessage.Capabilities,
         identityKey: [UInt8], offer: WebRTCOffer, transport: WebRTCAnswer.Transport, allowRED: Bool, nowNanoseconds: UInt64) {
        self.id = id
        identity = token.identity
        room = token.room
        self.ssrc = ssrc
        canPublish = token.canPublish
        isModerator = token.isModerator
        self.isEndToEndEncrypted = isEndToEndEncrypted
        self.capabilities = capabilities
        self.identityKey = identityKey
        self.token = tokenText
        iceUsernameFragment = transport.iceUsernameFragment
        responder = ICELiteResponder(localUsernameFragment: transport.iceUsernameFragment, localPassword: transport.icePassword,
                                     remoteUsernameFragment: offer.iceUsernameFragment)
        self.transport = transport
        firstOffer = offer
        self.allowRED = allowRED
        createdNanoseconds = nowNanoseconds
    }

    // MARK: The page's side

    /// The answer to the first offer.
    public var answer: String {
        WebRTCAnswer.answer(firstOffer, transport: transport, version: 1, outgoing: [:], allowRED: allowRED).text
    }

    /// The page's WebSocket opened: it gets what was queued, then every event as it comes.
    /// A second attach replaces the first.
    public func attach(_ sink: @escaping @Sendable (Event) -> Void) {
        let queued = state.withLock { state -> [Event] in
            state.sink = sink
            defer { state.queued = [] }
            return state.queued
        }
        for event in queued { sink(event) }
    }

    /// The page's WebSocket closed: the member leaves.
    public func detach() {
        let (loop, session) = state.withLock { state -> ((any BrowserLoop)?, Session?) in
            state.sink = nil
            return (state.loop, state.session)
        }
        if let loop, let session { loop.browserLeft(session) } else { end("the page closed before its call was set up") }
    }

    /// A control message from the page (state, text, moderation, media keys, leave, ping),
    /// handed to the member's loop as a `parley` client's would be. Before the session exists
    /// there is nothing to tell, and it is dropped.
    public func submit(_ body: ControlMessage.Body) {
        let target = state.withLock { state -> ((any BrowserLoop)?, Session?, UInt32) in
            defer { state.nextSequence &+= 1 }
            return (state.loop, state.session, state.nextSequence)
        }
        guard let loop = target.0, let session = target.1 else { return }
        loop.browserControl(ControlMessage(sequence: target.2, isReliable: true, body: body), from: session)
    }

    /// Answers the page's offer again: the same transport, with each section it receives on
    /// carrying the SSRC it asks for. Sections it adds to hear members who join.
    public func renegotiate(offer text: String, outgoing: [String: UInt32]) -> Result<String, WebRTCOfferError> {
        let description: SessionDescription
        do {
            description = try SessionDescription(parsing: text)
        } catch {
            return .failure(.unreadable(error.description))
        }
        let offer: WebRTCOffer
        do throws(WebRTCOfferError) {
            offer = try WebRTCOffer(description)
        } catch {
            return .failure(error)
        }
        guard offer.iceUsernameFragment == firstOffer.iceUsernameFragment, offer.fingerprint == firstOffer.fingerprint else {
            return .failure(.unreadable("an offer to renegotiate must keep the browser's ICE credentials and certificate"))
        }
        let version = state.withLock { state -> UInt64 in
            state.answerVersion += 1
            return state.answerVersion
        }
        return .success(WebRTCAnswer.answer(offer, transport: transport, version: version, outgoing: outgoing, allowRED: allowRED).text)
    }

    // MARK: The relay's side

    /// Hands `event` to the page, or keeps it until the page attaches.
    func deliver(_ event: Event) {
        let sink = state.withLock { state -> (@Sendable (Event) -> Void)? in
            guard !state.isEnded else { return nil }
            if case .ended = event { state.isEnded = true }
            if state.sink == nil, state.queued.count < Self.maximumQueuedEvents { state.queued.append(event) }
            return state.sink
        }
        sink?(event)
    }

    /// The member will not be (or is no longer) in a call: the page is told why, once.
    func end(_ reason: String) {
        deliver(.ended(reason))
    }

    var isEnded: Bool { state.withLock { $0.isEnded } }

    /// An authentic ICE check came from `peer`.
    func noteCheck(from peer: PeerAddress) {
        state.withLock { state in
            guard !state.checkedAddresses.contains(peer), state.checkedAddresses.count < Self.maximumCheckedAddresses else { return }
            state.checkedAddresses.append(peer)
        }
    }

    func wasChecked(from peer: PeerAddress) -> Bool { state.withLock { $0.checkedAddresses.contains(peer) } }

    /// The loop made the member's session; false if it already has one (a second ClientHello
    /// from another of its addresses).
    func bind(_ session: Session, loop: any BrowserLoop) -> Bool {
        state.withLock { state in
            guard state.session == nil, !state.isEnded else { return false }
            state.session = session
            state.loop = loop
            return true
        }
    }

    var hasSession: Bool { state.withLock { $0.session != nil } }
}

/// What a browser member's page and signalling ask of the loop its session lives on, from
/// any thread; each is carried out later on that loop.
protocol BrowserLoop: AnyObject, Sendable {
    func browserControl(_ message: ControlMessage, from session: Session)
    func browserLeft(_ session: Session)
}
