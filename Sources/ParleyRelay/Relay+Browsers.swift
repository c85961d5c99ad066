import ParleyBasics
import ParleyWebRTC
import ParleyWire

/// Browser members' signalling, as the web port asks it (the shape of WHIP, RFC 9725): an SDP
/// offer with the member's token is answered with the relay's SDP answer, or refused before
/// anything is kept; the page then hears what the relay tells it and says what it wants
/// through its ``BrowserMember`` (the web port's signalling socket).
extension Relay {
    static func makeBrowserEdge() throws -> BrowserEdge {
        do {
            return BrowserEdge(offers: BrowserOffers(), dtls: try DTLSContext())
        } catch {
            throw ConfigurationError("the relay could not make its DTLS certificate for browsers: \(error)")
        }
    }

    /// Why an offer was not answered, with the HTTP status that says so and words for the person.
    public struct BrowserOfferRefusal: Error, Sendable, Hashable, CustomStringConvertible {
        public let status: Int
        public let message: String
        public var description: String { message }
    }

    /// Answers a browser's offer: the token is checked first (form, signature, times, room and
    /// identity names), then the offer is read, and only then is anything kept (the member,
    /// its ICE credentials, until it connects or its offer expires). No DTLS state exists
    /// until its browser proves, over ICE, that it holds the answer's credentials.
    /// `candidateHost`: the address browsers reach the relay's UDP port at, when it listens on
    /// every interface (the host the page was loaded from) and no `browserCandidate` (the
    /// operator's `--public-address`) names it. `identityKey`: the page's X25519 public key,
    /// which it sends when it can take part in end-to-end encryption (it has
    /// `RTCRtpScriptTransform` and WebCrypto's X25519); the roster carries it to the others, as
    /// a `parley` member's. Without one, an end-to-end encrypted room refuses the offer.
    public func acceptBrowserOffer(_ sdp: String, token: String, candidateHost: String, identityKey: [UInt8]? = nil) -> Result<BrowserMember, BrowserOfferRefusal> {
        guard let edge = browserEdge, isRunning else {
            return .failure(BrowserOfferRefusal(status: 503, message: "this relay does not take browsers now"))
        }
        let claims: AccessToken
        do {
            let unverifiedRoom = try AccessToken.verifiedClaims(token, secret: joins.secret).room
            if let problem = ParleyNames.problem(withRoom: unverifiedRoom) {
                return .failure(BrowserOfferRefusal(status: 403, message: "the token's room name is not usable: \(problem)"))
            }
            claims = try AccessToken.verify(token, secret: joins.secret, room: unverifiedRoom, now: WallClock.seconds())
        } catch {
            return .failure(BrowserOfferRefusal(status: 403, message: error.message))
        }
        if let identityKey, identityKey.count != ControlMessage.identityKeySize {
            return .failure(BrowserOfferRefusal(status: 400, message: "the page's identity key is not an X25519 public key (32 bytes in base64url)"))
        }
        let takesPart = identityKey != nil
        if let problem = Self.browserEndToEndProblem(
            room: claims.room, endToEnd: core.isEndToEndEncrypted(claims.room, tokenAsks: claims.endToEndEncrypted),
            tokenAsks: claims.endToEndEncrypted, takesPart: takesPart) {
            return .failure(BrowserOfferRefusal(status: 403, message: problem))
        }
        // In a cluster the room is joined here (a browser cannot follow a redirect): asking now
        // places a room nobody hosts, and refuses at once one this relay cannot join.
        if let placement, case let .unavailable(text) = placement.routePinned(room: claims.room, whenDecided: { _ in }) {
            return .failure(BrowserOfferRefusal(status: 503, message: text))
        }
        let offer: WebRTCOffer
        do {
            offer = try WebRTCOffer(try SessionDescription(parsing: sdp))
        } catch let error as WebRTCOfferError {
            return .failure(BrowserOfferRefusal(status: 400, message: "the browser's offer cannot be used: \(error)"))
        } catch {
            return .failure(BrowserOfferRefusal(status: 400, message: "the browser's offer is not SDP the relay can read: \(error)"))
        }
        guard let ssrc = offer.sendingSSRC, ssrc != 0 else {
            return .failure(BrowserOfferRefusal(status: 400, message: "the browser's offer sends no microphone stream with an SSRC"))
        }
        let host = configuration.browserCandidate?.host ?? listenHostForBrowsers ?? candidateHost
        guard let port = configuration.browserCandidate?.port ?? localAddress.port, let udpPort = UInt16(exactly: port) else {
            return .failure(BrowserOfferRefusal(status: 503, message: "the relay's UDP port is not known"))
        }
        let transport = WebRTCAnswer.Transport(
            iceUsernameFragment: Self.randomICEText(count: 8), icePassword: Self.randomICEText(count: 24), fingerprint: edge.dtls.fingerprint,
            candidateAddress: host, candidatePort: udpPort, sessionID: UInt64.random(in: 1...(1 << 62)))
        let member = BrowserMember(id: Self.randomToken(bytes: 16), signallingKey: Self.randomToken(bytes: 32), token: claims, tokenText: token, offer: offer, ssrc: ssrc,
                                   transport: transport, allowRED: offer.redPayloadType != nil, identityKey: identityKey ?? [],
                                   nowNanoseconds: MonotonicClock.now())
        if let refusal = edge.offers.register(member, now: MonotonicClock.now()) {
            return .failure(BrowserOfferRefusal(status: 429, message: refusal))
        }
        logger.info("browser offer answered", metadata: ["identity": "\(claims.identity.logSafe())", "room": "\(claims.room.logSafe())"])
        return .success(member)
    }

    /// Why a browser member cannot join `room` as end-to-end encryption goes, in words for the
    /// person in the browser; nil when it can. Asked when the offer arrives and again when its
    /// leg is made (the room may have been made since, the other way).
    static func browserEndToEndProblem(room: String, endToEnd: Bool, tokenAsks: Bool, takesPart: Bool) -> String? {
        if endToEnd && !takesPart {
            return "\(room) is end-to-end encrypted, and this browser cannot take part in its encryption (it lacks RTCRtpScriptTransform "
                + "or WebCrypto's X25519, so the page sent no identity key); join from a browser that has both (current Chromium does), or with the parley client"
        }
        return Room.endToEndProblem(room: room, endToEnd: endToEnd, tokenAsks: tokenAsks, clientTakesPart: takesPart)
    }

    /// The browser member the page's signalling names, while its call is set up or runs.
    public func browserMember(id: String) -> BrowserMember? {
        browserEdge?.offers.member(id: id)
    }

    /// The address in the answer's candidate when the relay listens on one address: the only
    /// one it can name when the page reached it through a proxy on this machine.
    public var listenHostForBrowsers: String? {
        let host = configuration.listen.host
        return host == "0.0.0.0" || host == "::" || host.isEmpty ? nil : host
    }

    /// Random bytes as base64url (letters, digits, `-` and `_`: safe in a path and in a header).
    static func randomToken(bytes count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return Base64URL.encode((0..<count).map { _ in UInt8.random(in: 0 ... 255, using: &generator) })
    }

    /// Random ICE credentials in letters and digits (ice-chars, RFC 8839): 8 characters are
    /// 47 bits, 24 are 142 (RFC 8445 asks at least 24 and 128).
    static func randomICEText(count: Int) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        var generator = SystemRandomNumberGenerator()
        return String((0..<count).map { _ in alphabet.randomElement(using: &generator)! })
    }
}
