import ParleyBasics
import ParleyWebRTC
import ParleyWire

/// Browser members on one loop, by address, and what only a browser sends on the relay's one
/// UDP port (RFC 7983's ranges): ICE checks (STUN, 0–3) and its DTLS-SRTP handshake (DTLS,
/// 20–63). Its SRTP and SRTCP are a member's media: the worker finds its ``BrowserLeg`` in
/// ``MemberTable`` like any member's, and ``LegHandler`` opens them with its transport.
///
/// Strangers' work is kept cheap and bounded, as for `parley` joins. A STUN message is
/// answered only when it names the ufrag of an offer the relay answered (a token was checked
/// for it, over HTTP, before anything was kept) and its MESSAGE-INTEGRITY is that offer's: one
/// HMAC, within the source's budget; the answer is never larger than the request. A ClientHello
/// from an address such a check came from gets a DTLS cookie (a HelloVerifyRequest, smaller
/// than the hello, nothing kept); DTLS state is made only for the hello that returns it, within
/// the source's join budget.
///
/// One loop's thread only; nothing here is locked (the shared offers have their own lock, taken
/// only for a stranger's datagram).
final class BrowserTable: @unchecked Sendable {
    private let context: LoopContext
    private let legs: LegHandler
    private let members: MemberTable
    private unowned(unsafe) var admission: MemberAdmission!
    let edge: BrowserEdge
    /// This loop's browser members, by source address.
    private var byAddress: [PeerAddress: BrowserLeg] = [:]
    /// Members whose DTLS handshake runs: the tick retransmits their flights.
    private var handshaking: [PeerAddress: BrowserLeg] = [:]

    init(context: LoopContext, legs: LegHandler, members: MemberTable, edge: BrowserEdge) {
        self.context = context
        self.legs = legs
        self.members = members
        self.edge = edge
    }

    func attach(admission: MemberAdmission) {
        self.admission = admission
    }

    var count: Int { byAddress.count }

    /// A STUN message or DTLS record.
    func receive(_ datagram: inout InboundDatagram, now: UInt64) {
        if let leg = byAddress[datagram.peer], leg.state != .closed {
            switch datagram.kind {
            case .stun: answerCheck(datagram, page: leg.page, leg: leg, now: now)
            case .dtls: receiveDTLS(datagram, leg: leg, now: now)
            default: context.drop(.unknownKind)
            }
            return
        }
        switch datagram.kind {
        case .stun: receiveStrangerCheck(datagram, now: now)
        case .dtls: receiveStrangerClientHello(datagram, now: now)
        default: context.drop(.unknownKind)
        }
    }

    // MARK: ICE

    /// A check from an address with no leg: answered if it is an authentic check for an offer
    /// the relay answered, and the address remembered for its ClientHello.
    private func receiveStrangerCheck(_ datagram: InboundDatagram, now: UInt64) {
        // A binding request's first two bytes, before anything is parsed or looked up.
        guard datagram.readable.count >= 20, datagram.readable[0] == 0, datagram.readable[1] == 1 else { return context.drop(.stunUnanswered) }
        let page: BrowserMember?
        if let message = try? STUNMessageView(parsing: datagram.readable), message.type == .bindingRequest, let username = message.username,
           let fragment = ICELiteResponder.localUsernameFragment(of: username) {
            page = edge.offers.member(usernameFragment: fragment)
        } else {
            page = nil
        }
        guard let page, datagram.peer.canBeAnswered else { return context.drop(.stunUnanswered) }
        guard context.budgets.cookieReplies.allow(datagram.peer.host, nowNanoseconds: now) else { return context.drop(.helloRateLimited) }
        if answerCheck(datagram, page: page, leg: nil, now: now) {
            edge.offers.noteCheck(page, from: datagram.peer)
        }
    }

    /// Answers an ICE check for `page` (a connectivity check, or later a consent check, which
    /// keeps the leg alive as a `parley` member's ping does). True if it was authentic.
    @discardableResult
    private func answerCheck(_ datagram: InboundDatagram, page: BrowserMember, leg: BrowserLeg?, now: UInt64) -> Bool {
        guard let source = datagram.peer.stunAddress, let message = try? STUNMessageView(parsing: datagram.readable) else {
            context.drop(.stunUnanswered)
            return false
        }
        var answer = [UInt8](repeating: 0, count: ICELiteResponder.maximumAnswerSize)
        let outcome = answer.withUnsafeMutableBytes { page.responder.answer(message, from: source, into: $0) }
        guard case let .answered(count, _) = outcome, count <= datagram.wireSize else {
            context.drop(.stunUnanswered)
            return false
        }
        leg?.lastHeardNanoseconds = now
        context.channel.send(Array(answer.prefix(count)), to: datagram.source, kind: .control)
        return true
    }

    // MARK: DTLS

    /// A ClientHello from an address an authentic check came from. The first is answered with
    /// a DTLS cookie for its address and nothing is kept (an ICE check proves nothing about the
    /// sender's address: anyone who holds the offer can send one from any address); the hello
    /// that returns the cookie makes the member's leg, with its DTLS state, and puts it in its
    /// room as joining. Never at an address a `parley` member holds: that member stays.
    private func receiveStrangerClientHello(_ datagram: InboundDatagram, now: UInt64) {
        guard !context.isShuttingDown, DTLSRecordHeader.startsHandshake(datagram.readable),
              let page = edge.offers.member(checkedFrom: datagram.peer),
              members.member(at: datagram.peer) == nil else { return context.drop(.dtlsRefused) }
        guard context.budgets.cookieReplies.allow(datagram.peer.host, nowNanoseconds: now) else { return context.drop(.helloRateLimited) }
        let dtls: DTLSConnection
        do {
            dtls = try DTLSConnection(context: edge.dtls, isServer: true, peerFingerprint: page.offer.fingerprint)
        } catch {
            page.end("the relay could not set up a secure connection with your browser: \(error)")
            edge.offers.remove(page)
            return context.drop(.dtlsRefused)
        }
        switch dtls.listen(datagram.readable, peer: datagram.peer.cookieBytes) {
        case .cookieRequested:
            for answer in dtls.takeDatagrams() where answer.count <= datagram.wireSize {
                context.channel.send(answer, to: datagram.source, kind: .control)
            }
            return
        case .refused:
            return context.drop(.dtlsRefused)
        case .verified:
            break
        }
        guard context.budgets.joinAttempts.allow(datagram.peer.host, nowNanoseconds: now) else { return context.drop(.joinRateLimited) }
        switch admission.browserPlacement(room: page.room) {
        case .ready:
            break
        case .waiting:
            return context.drop(.placementPending)
        case let .refused(problem):
            page.end(problem)
            edge.offers.remove(page)
            return context.drop(.notJoined)
        }
        // Whether the room is end-to-end encrypted, decided as for a `parley` member's join: the
        // room may have been made, the other way, since the offer was answered.
        let endToEnd = context.rooms.isEndToEndEncrypted(page.room, tokenAsks: page.tokenAsksEndToEnd)
        if let problem = Relay.browserEndToEndProblem(room: page.room, endToEnd: endToEnd, tokenAsks: page.tokenAsksEndToEnd,
                                                      takesPart: !page.identityKey.isEmpty) {
            context.metrics.joinRefused(.endToEndEncryptionRequired)
            page.end(problem)
            edge.offers.remove(page)
            return context.drop(.notJoined)
        }
        // A leg that ended at this address and was not yet finished by the tick: finished now,
        // so its offer is forgotten and its page told before another takes its place.
        if let ended = byAddress[datagram.peer] { finish(ended) }
        let leg = BrowserLeg(page: page, dtls: dtls, id: context.rooms.makeLegID(), address: datagram.source, peer: datagram.peer,
                             workerIndex: context.index, limits: context.limits, isEndToEndEncrypted: endToEnd, nowNanoseconds: now)
        guard page.bind(leg, loop: self) else { return context.drop(.dtlsRefused) }
        switch admission.admit(leg, replacing: nil, software: "browser", now: now) {
        case let .refused(_, text):
            page.end(text)
            edge.offers.remove(page)
            return
        case .admitted:
            break
        }
        byAddress[leg.peer] = leg
        page.append(BrowserPageEvent(kind: "joined", identity: leg.identity, room: leg.room, moderator: page.isModerator,
                                     e2ee: leg.isEndToEndEncrypted))
        handshakeWent(leg, to: leg.dtls.start(), now: now)
    }

    /// A DTLS datagram from a browser member: the handshake goes on, and when it is done the
    /// leg gets its SRTP keys and becomes active (what `ready` does for a `parley` member).
    private func receiveDTLS(_ datagram: InboundDatagram, leg: BrowserLeg, now: UInt64) {
        let wasEstablished = leg.dtls.state == .established
        handshakeWent(leg, to: leg.dtls.receive(datagram.readable), wasEstablished: wasEstablished, now: now)
    }

    private func handshakeWent(_ leg: BrowserLeg, to state: DTLSConnection.State, wasEstablished: Bool = false, now: UInt64) {
        sendDTLSDatagrams(of: leg, now: now)
        switch state {
        case .established where !wasEstablished:
            leg.lastHeardNanoseconds = now
            establish(leg, now: now)
        case .established, .handshaking:
            leg.lastHeardNanoseconds = now
        case .failed:
            context.drop(.dtlsRefused)
            members.remove(leg, reason: .browserTransportFailed, now: now)
        case .closed:
            members.remove(leg, reason: .left, now: now, tellMember: false)
        }
    }

    private func sendDTLSDatagrams(of leg: BrowserLeg, now: UInt64) {
        for datagram in leg.dtls.takeDatagrams() { context.channel.send(datagram, to: leg.destination, kind: .control) }
        if let delay = leg.dtls.retransmissionDelayMilliseconds, leg.dtls.state == .handshaking {
            leg.dtlsDeadlineNanoseconds = now &+ UInt64(delay) &* 1_000_000
            handshaking[leg.peer] = leg
        } else {
            leg.dtlsDeadlineNanoseconds = 0
            handshaking[leg.peer] = nil
        }
    }

    /// The handshake is done: SRTP both ways, and the member joins its room's forwarding.
    private func establish(_ leg: BrowserLeg, now: UInt64) {
        guard leg.state == .joining, let keys = leg.dtls.srtpKeys(),
              let inbound = SRTPContext(profile: keys.profile, keyAndSalt: keys.client, direction: .inbound,
                                        maximumStreams: Self.maximumInboundStreams),
              let outbound = SRTPContext(profile: keys.profile, keyAndSalt: keys.server, direction: .outbound) else {
            return members.remove(leg, reason: .browserTransportFailed, now: now)
        }
        leg.browserTransport.setKeys(inbound: inbound, outbound: outbound)
        members.activate(leg, now: now)
        leg.page.append(BrowserPageEvent(kind: "connected"))
        context.membershipLogs.log(.info, "browser member connected", metadata: ["member": "\(leg.logDescription)", "srtp": "\(keys.profile)"], now: now)
    }

    /// The browser's voice and the few SSRCs its reports may come from.
    static let maximumInboundStreams = 4

    // MARK: The tick

    /// When offers whose browser never came are next forgotten (loop 0 only).
    private var nextExpiryNanoseconds: UInt64 = 0
    private static let expiryIntervalNanoseconds: UInt64 = 1_000_000_000

    /// DTLS flights whose answer did not come, reliable messages the pages were handed (as
    /// acknowledged), legs that ended (close_notify, their offers forgotten), offers that expired.
    func tick(now: UInt64) {
        for leg in Array(handshaking.values) {
            guard leg.state != .closed else {
                handshaking[leg.peer] = nil
                continue
            }
            guard leg.dtlsDeadlineNanoseconds != 0, now >= leg.dtlsDeadlineNanoseconds else { continue }
            if leg.dtls.handleTimeout() == .failed {
                members.remove(leg, reason: .browserTransportFailed, now: now)
                continue
            }
            sendDTLSDatagrams(of: leg, now: now)
        }
        var ended: [BrowserLeg] = []
        for leg in byAddress.values {
            if leg.state == .closed {
                ended.append(leg)
                continue
            }
            for sequence in leg.page.takeAcknowledgements() { legs.acknowledge(sequence, on: leg, now: now) }
        }
        for leg in ended { finish(leg) }
        if context.index == 0, now >= nextExpiryNanoseconds {
            nextExpiryNanoseconds = now &+ Self.expiryIntervalNanoseconds
            edge.offers.expire(now: now)
        }
    }

    /// A leg that ended: close_notify to the browser, the offer forgotten, the page told (and
    /// its hold on the leg let go, which frees the leg, its DTLS and its SRTP).
    private func finish(_ leg: BrowserLeg) {
        if byAddress[leg.peer] === leg { byAddress[leg.peer] = nil }
        handshaking[leg.peer] = nil
        if leg.dtls.state == .established {
            leg.dtls.shutdown()
            for datagram in leg.dtls.takeDatagrams() { context.channel.send(datagram, to: leg.destination, kind: .control) }
        }
        edge.offers.remove(leg.page)
        leg.page.end("you left the call")
    }
}

extension BrowserTable: BrowserLoop {
    /// What the page said, handled on this loop as a `parley` member's control message would
    /// be (its state, a text, leaving), within the same control budget as one sent over UDP.
    /// Leaving is taken over the budget: the page sends it once and is not told if it is lost.
    func pageSaid(_ message: ControlMessage, leg: BrowserLeg) {
        context.loop.execute {
            guard leg.state != .closed else { return }
            let now = MonotonicClock.now()
            if case .leave = message.body {} else if !leg.controlRate.allow(nowNanoseconds: now) { return self.context.drop(.rateLimited) }
            leg.lastHeardNanoseconds = now
            self.members.receiveControl(message, from: leg, wireSize: 1_200, now: now)
            self.context.channel.flush()
        }
    }
}
