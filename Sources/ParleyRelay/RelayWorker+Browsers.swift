import NIOCore
import ParleyWebRTC
import ParleyWire

/// Browser members on the relay's one UDP port (RFC 7983's ranges: STUN 0–3, DTLS 20–63,
/// SRTP and SRTCP 128–191): ICE-lite answers, the DTLS-SRTP handshake, and their media, which
/// once opened goes through the same forwarding, RTCP termination and control paths as a
/// `parley` member's. A browser member is a ``Session`` whose transport is a
/// ``BrowserTransport`` and whose ``PacketProtector`` is SRTP.
///
/// Strangers' work is kept cheap and bounded, as for `parley` joins: a STUN message is
/// answered only when it names the ufrag of an offer the relay answered (a token was checked
/// for it) and its MESSAGE-INTEGRITY is that offer's, each costing one HMAC within the
/// source's budget; DTLS state is made only for a ClientHello from an address such a check
/// came from.
extension RelayWorker: BrowserLoop {
    /// A datagram from a browser member, or in STUN's or DTLS's range from a stranger.
    func receiveBrowserDatagram(_ buffer: ByteBuffer, kind: PacketKind, from address: DatagramAddress, peer: PeerAddress,
                                session: Session?, now: UInt64) {
        if let session, let transport = session.browser {
            switch kind {
            case .stun: answerCheck(buffer, from: address, peer: peer, member: transport.member, session: session, now: now)
            case .dtls: receiveDTLS(buffer, transport: transport, session: session, now: now)
            case .rtp, .rtcp: receiveSRTP(buffer, rtcp: kind == .rtcp, transport: transport, session: session, now: now)
            default: drop(.unknownKind)
            }
            return
        }
        guard let browsers else { return drop(.unknownKind) }
        switch kind {
        case .stun: receiveStrangerCheck(buffer, from: address, peer: peer, offers: browsers.offers, now: now)
        case .dtls: receiveStrangerClientHello(buffer, from: address, peer: peer, browsers: browsers, now: now)
        default: drop(.unknownKind)
        }
    }

    // MARK: ICE

    /// A check from an address with no session: answered if it is an authentic check for an
    /// offer the relay answered, and the address remembered for its ClientHello.
    private func receiveStrangerCheck(_ buffer: ByteBuffer, from address: DatagramAddress, peer: PeerAddress, offers: BrowserOffers, now: UInt64) {
        let member = buffer.withUnsafeReadableBytes { raw -> BrowserMember? in
            guard let message = try? STUNMessageView(parsing: raw), message.type == .bindingRequest, let username = message.username,
                  let fragment = ICELiteResponder.localUsernameFragment(of: username) else { return nil }
            return offers.member(usernameFragment: fragment)
        }
        guard let member, peer.canBeAnswered else { return drop(.stunUnanswered) }
        guard budgets.cookieReplies.allow(peer.host, nowNanoseconds: now) else { return drop(.helloRateLimited) }
        if answerCheck(buffer, from: address, peer: peer, member: member, session: nil, now: now) {
            offers.noteCheck(member, from: peer)
        }
    }

    /// Answers an ICE check for `member` (a connectivity check, or later a consent check,
    /// which keeps the session alive as a `parley` member's ping does). True if it was authentic.
    @discardableResult
    private func answerCheck(_ buffer: ByteBuffer, from address: DatagramAddress, peer: PeerAddress, member: BrowserMember,
                             session: Session?, now: UInt64) -> Bool {
        guard let source = peer.stunAddress else { drop(.stunUnanswered); return false }
        var answer = [UInt8](repeating: 0, count: ICELiteResponder.maximumAnswerSize)
        let outcome = buffer.withUnsafeReadableBytes { raw -> ICELiteResponder.Outcome in
            guard let message = try? STUNMessageView(parsing: raw) else { return .ignored(.notABindingRequest) }
            return answer.withUnsafeMutableBytes { member.responder.answer(message, from: source, into: $0) }
        }
        guard case let .answered(count, _) = outcome else {
            drop(.stunUnanswered)
            return false
        }
        session?.lastHeardNanoseconds = now
        send(Array(answer.prefix(count)), to: address, kind: .control)
        return true
    }

    // MARK: DTLS

    /// A ClientHello from an address an authentic check came from: the member's session is
    /// made here, with its DTLS state, and put in its room.
    private func receiveStrangerClientHello(_ buffer: ByteBuffer, from address: DatagramAddress, peer: PeerAddress, browsers: BrowserEdge, now: UInt64) {
        guard !isShuttingDown, buffer.withUnsafeReadableBytes({ DTLSRecordHeader.startsHandshake($0) }),
              let member = browsers.offers.member(checkedFrom: peer) else { return drop(.dtlsRefused) }
        guard budgets.joinAttempts.allow(peer.host, nowNanoseconds: now) else { return drop(.joinRateLimited) }
        let dtls: DTLSConnection
        do {
            dtls = try DTLSConnection(context: browsers.dtls, isServer: true, peerFingerprint: member.firstOffer.fingerprint)
        } catch {
            member.end("the relay could not set up a secure connection: \(error)")
            return drop(.dtlsRefused)
        }
        let transport = BrowserTransport(member: member, dtls: dtls)
        let session = Session(
            id: rooms.makeSessionID(), address: address, peer: peer, room: member.room, identity: member.identity, ssrc: member.ssrc,
            canPublish: member.canPublish, isModerator: member.isModerator, capabilities: member.capabilities,
            identityKey: member.isEndToEndEncrypted ? member.identityKey : [], isEndToEndEncrypted: member.isEndToEndEncrypted,
            cookie: UInt64.random(in: 1 ... .max), token: member.token, workerIndex: index, limits: limits, nowNanoseconds: now,
            browser: transport)
        guard member.bind(session, loop: self) else { return drop(.dtlsRefused) }
        switch admit(session, replacing: sessions[peer], software: "browser", now: now) {
        case let .refused(_, text):
            member.end(text)
            browsers.offers.remove(member)
            return
        case .admitted:
            break
        }
        member.deliver(.control(ControlMessage(sequence: 0, body: .joined(joined(for: session)))))
        receiveDTLS(buffer, transport: transport, session: session, now: now)
    }

    /// What a browser member is told when it is in its room, as `joined` tells a `parley` member.
    private func joined(for session: Session) -> ControlMessage.Joined {
        ControlMessage.Joined(
            cookie: session.cookie, ssrc: session.ssrc, identity: session.identity, room: session.room, canPublish: session.canPublish,
            isEndToEndEncrypted: session.isEndToEndEncrypted, keepaliveIntervalMilliseconds: UInt32(limits.keepaliveIntervalMilliseconds),
            idleTimeoutMilliseconds: UInt32(limits.idleTimeoutMilliseconds), clusterRelays: [])
    }

    /// A DTLS datagram from a browser member: the handshake goes on, and when it is done the
    /// session gets its SRTP keys and becomes active (what `ready` does for a `parley` member).
    private func receiveDTLS(_ buffer: ByteBuffer, transport: BrowserTransport, session: Session, now: UInt64) {
        let wasEstablished = transport.dtls.state == .established
        let state = buffer.withUnsafeReadableBytes { transport.dtls.receive($0) }
        sendDTLSDatagrams(transport, to: session, now: now)
        switch state {
        case .established where !wasEstablished:
            session.lastHeardNanoseconds = now
            establish(session, transport: transport, now: now)
        case .established, .handshaking:
            session.lastHeardNanoseconds = now
        case .failed:
            drop(.dtlsRefused)
            closeBrowser(session, reason: .browserTransportFailed, now: now)
        case .closed:
            closeBrowser(session, reason: .left, now: now)
        }
    }

    private func sendDTLSDatagrams(_ transport: BrowserTransport, to session: Session, now: UInt64) {
        for datagram in transport.dtls.takeDatagrams() { send(datagram, to: session.address, kind: .control) }
        if let delay = transport.dtls.retransmissionDelayMilliseconds {
            transport.dtlsDeadlineNanoseconds = now &+ UInt64(delay) * 1_000_000
            handshakingBrowsers[session.peer] = session
        } else {
            transport.dtlsDeadlineNanoseconds = 0
            handshakingBrowsers[session.peer] = nil
        }
    }

    private func establish(_ session: Session, transport: BrowserTransport, now: UInt64) {
        guard session.state == .joining, let keys = transport.dtls.srtpKeys(),
              let inbound = SRTPContext(profile: keys.profile, keyAndSalt: keys.client, direction: .inbound),
              let outbound = SRTPContext(profile: keys.profile, keyAndSalt: keys.server, direction: .outbound) else {
            return closeBrowser(session, reason: .browserTransportFailed, now: now)
        }
        transport.inbound = inbound
        session.secure(browser: BrowserProtection(outbound: outbound, mapping: transport.mapping))
        activate(session, now: now)
        transport.member.deliver(.connected)
    }

    /// The tick: DTLS flights of handshakes in progress whose answer did not come.
    func retransmitBrowserHandshakes(now: UInt64) {
        for session in handshakingBrowsers.values {
            guard let transport = session.browser, session.state != .closed else {
                handshakingBrowsers[session.peer] = nil
                continue
            }
            guard transport.dtlsDeadlineNanoseconds != 0, now >= transport.dtlsDeadlineNanoseconds else { continue }
            if transport.dtls.handleTimeout() == .failed {
                closeBrowser(session, reason: .browserTransportFailed, now: now)
                continue
            }
            sendDTLSDatagrams(transport, to: session, now: now)
        }
    }

    // MARK: Media

    /// SRTP or SRTCP from a browser member: opened (into a buffer of its own, as a sealed
    /// packet is), renumbered as Parley's, then forwarded or terminated as a member's.
    private func receiveSRTP(_ buffer: ByteBuffer, rtcp: Bool, transport: BrowserTransport, session: Session, now: UInt64) {
        guard let inbound = transport.inbound else { return drop(.notActive) }
        var packet = allocator.buffer(capacity: buffer.readableBytes)
        packet.writeImmutableBuffer(buffer)
        let opened = packet.withUnsafeMutableReadableBytes { raw -> Result<Int, SRTPFailure> in
            let result = inbound.unprotect(raw, count: raw.count, rtcp: rtcp)
            if case let .success(count) = result, !rtcp, !transport.mapping.toParley(UnsafeMutableRawBufferPointer(rebasing: raw[0..<count])) {
                return .failure(.malformed)
            }
            return result
        }
        switch opened {
        case let .success(count):
            packet.moveWriterIndex(to: packet.readerIndex + count)
            if rtcp { receiveRTCP(packet, from: session, now: now) } else { forwardMedia(packet, from: session, now: now) }
        case .failure(.replayed): drop(.replayed)
        case .failure(.authenticationFailed): drop(.decryptFailed)
        case .failure(.malformed): drop(.malformed)
        }
    }

    // MARK: The page's signalling

    func browserControl(_ message: ControlMessage, from session: Session) {
        loop.execute {
            guard session.state != .closed else { return }
            self.handleControl(message, from: session, receivedSize: Int.max, now: monotonicNanoseconds())
            self.flush()
        }
    }

    func browserLeft(_ session: Session) {
        loop.execute {
            guard session.state != .closed else { return }
            let now = monotonicNanoseconds()
            self.membershipLogs.log(.info, "browser member left (its page closed)", metadata: ["member": "\(session.logDescription)"], now: now)
            self.closeBrowser(session, reason: .left, now: now)
            self.flush()
        }
    }

    /// Hands a control message for a browser member to its page. The page's WebSocket is
    /// reliable, so a reliable message counts as acknowledged once handed over (later, on this
    /// loop, as a `parley` member's ack would arrive).
    func sendToPage(_ bytes: [UInt8], member: BrowserMember, session: Session) {
        guard let message = bytes.withUnsafeBytes({ try? ControlMessage(parsing: $0) }) else { return }
        member.deliver(.control(message))
        guard message.isReliable else { return }
        let sequence = message.sequence
        loop.execute {
            guard session.state != .closed else { return }
            self.acknowledge(sequence, from: session, now: monotonicNanoseconds())
            self.flush()
        }
    }

    /// Ends a browser member's call: out of its room, the page told why (the goodbye goes over
    /// its WebSocket), DTLS closed.
    func closeBrowser(_ session: Session, reason: RemovalReason, now: UInt64) {
        guard session.state != .closed else { return }
        remove(session, reason: reason, now: now, tellMember: reason != .left)
    }

    /// The browser side of ``finishClosing``: close_notify to the browser, the offer forgotten,
    /// the page told the call is over.
    func finishClosingBrowser(_ session: Session, transport: BrowserTransport, reason: RemovalReason) {
        handshakingBrowsers[session.peer] = nil
        if transport.dtls.state == .established {
            transport.dtls.shutdown()
            for datagram in transport.dtls.takeDatagrams() { send(datagram, to: session.address, kind: .control) }
        }
        browsers?.offers.remove(transport.member)
        transport.member.end(reason == .left ? "you left the call" : reason.goodbyeText)
    }
}

/// What a relay that takes browser members shares between its loops: the offers it answered
/// and its DTLS certificate.
struct BrowserEdge: Sendable {
    let offers: BrowserOffers
    let dtls: DTLSContext
}
