import NIOCore
import ParleySecurity
import ParleyWire

/// Joining: a plaintext join (relays started `--insecure`) or the Noise handshake that
/// carries one, checked by ``JoinVerifier``, admitted to its room through ``RoomMembership``,
/// and made active when the member proves its address with `ready`.
///
/// Strangers' work is kept cheap and bounded: nothing is answered with more bytes than came
/// in, every answer is charged to the source's ``AdmissionBudgets``, and a handshake's costly
/// steps come only after the cheap proofs (``receiveHandshake(_:from:peer:now:)``).
extension RelayWorker {
    /// A plaintext join (relays started `--insecure`).
    func receiveJoin(_ message: ControlMessage, size: Int, from address: DatagramAddress, peer: PeerAddress, existing: Session?, now: UInt64,
                     decided: PlacementRoute? = nil) {
        guard case let .join(join) = message.body else { return }
        // Joins are padded so the answer is never larger than the question; a short one is
        // not from a Parley client and gets no answer at all.
        guard size >= ControlMessage.minimumJoinSize else { return drop(.malformed) }
        guard !isShuttingDown else { return }
        if let existing, existing.ssrc == join.ssrc, existing.room == join.room, existing.token == join.token {
            // A retransmitted join: the same answer, same cookie.
            existing.lastHeardNanoseconds = now
            if existing.joinedMessage.count <= size { send(existing.joinedMessage, to: address, kind: .control) }
            return
        }
        // A parked join spent its budget when it first came.
        guard decided != nil || budgets.joinAttempts.allow(peer.host, nowNanoseconds: now) else { return drop(.joinRateLimited) }
        let token: AccessToken
        switch joins.verify(join, unixSeconds: unixSeconds()) {
        case let .refused(code, text, logReason):
            metrics.joinRefused(code)
            refuseJoin(code, message: text, logReason: logReason, sequence: message.sequence, peer: peer, address: address, size: size, now: now)
            return
        case let .verified(verified):
            token = verified
        }
        let parked = ParkedJoin(value: (message, address, peer))
        switch placeJoin(room: join.room, token: token, decided: decided, resume: { [self] route in
            loop.execute { [self] in
                guard !isShuttingDown else { return }
                let (message, address, peer) = parked.value
                receiveJoin(message, size: size, from: address, peer: peer, existing: sessions[peer], now: monotonicNanoseconds(), decided: route)
            }
        }) {
        case .admit: break
        case .parked: return
        case let .redirect(redirect): return answerRedirect(redirect, sequence: message.sequence, to: address, size: size, now: now)
        case let .refuse(text):
            metrics.joinRefused(.placementUnavailable)
            refuseJoin(.placementUnavailable, message: text, logReason: text, sequence: message.sequence, peer: peer, address: address, size: size, now: now)
            return
        }
        let endToEnd: Bool
        switch endToEndEncryption(for: join, token: token) {
        case let .success(decided): endToEnd = decided
        case let .failure(refusal):
            metrics.joinRefused(.endToEndEncryptionRequired)
            refuseJoin(.endToEndEncryptionRequired, message: refusal.text, logReason: refusal.text, sequence: message.sequence, peer: peer,
                       address: address, size: size, now: now)
            return
        }
        let session = makeSession(join, sequence: message.sequence, token: token, endToEnd: endToEnd, address: address, peer: peer, now: now)
        switch admit(session, replacing: existing, software: join.software, now: now) {
        case let .refused(code, text):
            refuseJoin(code, message: text, logReason: text, sequence: message.sequence, peer: peer, address: address, size: size, now: now)
        case .admitted:
            if session.joinedMessage.count <= size { send(session.joinedMessage, to: address, kind: .control) }
        }
    }

    struct EndToEndRefusal: Error {
        let text: String
    }

    /// Whether the join's room is end-to-end encrypted (what its `joined` says), or why the
    /// join cannot come in: a room that is, and a client that cannot take part; or a token that
    /// asks for it, and a room already running without.
    func endToEndEncryption(for join: ControlMessage.Join, token: AccessToken) -> Result<Bool, EndToEndRefusal> {
        let endToEnd = rooms.isEndToEndEncrypted(join.room, tokenAsks: token.endToEndEncrypted)
        let takesPart = join.capabilities.contains(.endToEndEncryption) && join.identityKey.count == ControlMessage.identityKeySize
        if let problem = Room.endToEndProblem(room: join.room, endToEnd: endToEnd, tokenAsks: token.endToEndEncrypted, clientTakesPart: takesPart) {
            return .failure(EndToEndRefusal(text: problem))
        }
        return .success(endToEnd)
    }

    /// A session for a verified join, with its `joined` answer ready. In an end-to-end
    /// encrypted room the member's identity key goes in the roster; elsewhere it is not kept.
    func makeSession(
        _ join: ControlMessage.Join, sequence: UInt32, token: AccessToken, endToEnd: Bool, address: DatagramAddress, peer: PeerAddress, now: UInt64
    ) -> Session {
        let session = Session(
            id: rooms.makeSessionID(), address: address, peer: peer, room: join.room, identity: token.identity,
            ssrc: join.ssrc, canPublish: token.canPublish, isModerator: token.isModerator, capabilities: join.capabilities,
            identityKey: endToEnd ? join.identityKey : [], isEndToEndEncrypted: endToEnd, cookie: UInt64.random(in: 1 ... .max), token: join.token,
            workerIndex: index, limits: limits, nowNanoseconds: now)
        var joined = ControlMessage.Joined(
            cookie: session.cookie, ssrc: session.ssrc, identity: session.identity, room: session.room,
            canPublish: session.canPublish, isEndToEndEncrypted: endToEnd,
            keepaliveIntervalMilliseconds: UInt32(limits.keepaliveIntervalMilliseconds),
            idleTimeoutMilliseconds: UInt32(limits.idleTimeoutMilliseconds), clusterRelays: clusterFallbacks)
        // The identity and room are checked, so only the fallbacks (from the store) can fail to
        // serialise: then the answer goes without them, never empty.
        if let bytes = try? ControlMessage(sequence: sequence, body: .joined(joined)).serialized() {
            session.joinedMessage = bytes
        } else {
            joined.clusterRelays = []
            session.joinedMessage = (try? ControlMessage(sequence: sequence, body: .joined(joined)).serialized()) ?? []
        }
        return session
    }

    /// Puts `session` in its room (limits, SSRC, identity), ending `existing` — a session from
    /// the same address — and any session of the same identity elsewhere.
    func admit(_ session: Session, replacing existing: Session?, software: String, now: UInt64) -> RoomAdmission {
        if let existing {
            // The same address joins afresh (a new SSRC, token or handshake): the old session
            // ends quietly, since the client that would hear its goodbye is the one joining.
            remove(existing, reason: .replaced, now: now, tellMember: false)
        }
        switch rooms.admit(session, now: now) {
        case let .refused(code, text):
            metrics.joinRefused(code)
            return .refused(code, text)
        case let .admitted(replaced):
            sessions[session.peer] = session
            sweepSlices[Self.sweepSlice(of: session)][session.peer] = session
            metrics.joinsAccepted.increment()
            membershipLogs.log(.info, "member joining", metadata: [
                "member": "\(session.logDescription)", "software": "\(software.logSafe())",
                "publish": "\(session.canPublish)", "encrypted": "\(session.protector.isSecure)",
            ], now: now)
            if let replaced {
                membershipLogs.log(.info, "member replaced by a new session", metadata: ["member": "\(replaced.logDescription)"], now: now)
            }
            return .admitted(replaced: replaced)
        }
    }

    func refuseJoin(
        _ code: ControlMessage.ErrorCode, message: String, logReason: String, sequence: UInt32,
        peer: PeerAddress, address: DatagramAddress, size: Int, now: UInt64
    ) {
        drop(.notJoined)
        guard peer.canBeAnswered, budgets.errorReplies.allow(peer.host, nowNanoseconds: now) else { return }
        refusalLogs.log(.notice, "join refused", metadata: ["from": "\(peer)", "reason": "\(logReason.logSafe(limit: 200))"], now: now)
        sendError(code, message, sequence: sequence, to: address, limit: size)
    }

    // MARK: The encrypted handshake

    /// Hello and handshake init. Answers only what checks out, never with more bytes than came
    /// in. An init's cookie is checked first (an HMAC, no state, no budget), then its source's
    /// and the loop's join budget is spent, then the Diffie-Hellman; its handshake is recorded
    /// against replays only once the join inside has verified (``receiveSecureJoin``).
    func receiveHandshake(_ buffer: ByteBuffer, from address: DatagramAddress, peer: PeerAddress, now: UInt64) {
        guard let handshake = joins.handshake else { return }
        let size = buffer.readableBytes
        guard peer.canBeAnswered else { return drop(.malformed) }
        let unixTime = UInt64(unixSeconds())
        switch buffer.getInteger(at: buffer.readerIndex, as: UInt8.self).flatMap(SecureMessageType.init(rawValue:)) {
        case .hello:
            guard budgets.cookieReplies.allow(peer.host, nowNanoseconds: now) else { return drop(.helloRateLimited) }
            let reply = buffer.withUnsafeReadableBytes {
                handshake.cookieReply(toHello: $0, address: peer.cookieBytes, unixSeconds: unixTime)
            }
            guard let reply, reply.count <= size else { return drop(.malformed) }
            send(reply, to: address, kind: .control)
        case .handshakeInit:
            guard !isShuttingDown else { return }
            let existing = sessions[peer]
            enum Outcome { case opened(AcceptedHandshake), overBudget, refused(SecurityError) }
            let outcome: Outcome = buffer.withUnsafeReadableBytes { raw in
                do throws(SecurityError) {
                    let message = try handshake.checkCookie(raw, address: peer.cookieBytes, unixSeconds: unixTime)
                    guard budgets.joinAttempts.allow(peer.host, nowNanoseconds: now) else { return .overBudget }
                    return .opened(try handshake.open(message))
                } catch {
                    return .refused(error)
                }
            }
            switch outcome {
            case let .opened(accepted) where joins.replayCache.contains(accepted.ephemeralKey, unixSeconds: unixTime):
                // A retransmitted init (its response was lost) gets the same response again; a
                // replay of one whose session is gone gets nothing.
                if let existing, let made = existing.handshake, made.ephemeralKey == accepted.ephemeralKey, made.response.count <= size {
                    send(made.response, to: address, kind: .control)
                } else {
                    drop(.handshakeReplayed)
                }
            case let .opened(accepted):
                receiveSecureJoin(accepted, size: size, from: address, peer: peer, existing: existing, now: now)
            case .overBudget:
                drop(.joinRateLimited)
            case .refused(.invalidCookie):
                drop(.cookieInvalid)
            case .refused:
                drop(.handshakeFailed)
            }
        case .cookie:
            receiveTrunkCookie(buffer, from: address, now: now)
        case .trunkInit:
            receiveTrunkInit(buffer, from: address, peer: peer, now: now)
        case .trunkResponse:
            receiveTrunkResponse(buffer, from: address, peer: peer, now: now)
        default:
            drop(.unexpectedControl)
        }
    }

    /// The join inside an accepted handshake: the same checks as a plaintext join; the answer
    /// (joined, or the refusal) goes back inside the handshake response, so it is authenticated.
    func receiveSecureJoin(_ accepted: AcceptedHandshake, size: Int, from address: DatagramAddress, peer: PeerAddress, existing: Session?, now: UInt64,
                           decided: PlacementRoute? = nil) {
        guard let message = try? ControlMessage(parsing: accepted.payload), case let .join(join) = message.body else {
            return drop(.malformed)
        }
        // Refusals answer with a copy of the accepted handshake, so one can be made whatever happens.
        let refusalHandshake = accepted
        func refuse(_ code: ControlMessage.ErrorCode, _ text: String, logReason: String) {
            drop(.notJoined)
            guard budgets.errorReplies.allow(peer.host, nowNanoseconds: now) else { return }
            refusalLogs.log(.notice, "join refused", metadata: ["from": "\(peer)", "reason": "\(logReason.logSafe(limit: 200))"], now: now)
            var handshake = refusalHandshake
            let error = ControlMessage(sequence: message.sequence, body: .error(ControlMessage.ErrorReply(code: code, message: text)))
            guard let payload = try? error.serialized(),
                  let (response, _) = try? handshake.respond(relayIndex: 0, payload: payload, nowNanoseconds: now),
                  response.count <= size else { return }
            send(response, to: address, kind: .control)
        }

        let token: AccessToken
        switch joins.verify(join, unixSeconds: unixSeconds()) {
        case let .refused(code, text, logReason):
            metrics.joinRefused(code)
            return refuse(code, text, logReason: logReason)
        case let .verified(verified):
            token = verified
        }
        // Before the replay cache: a redirected or parked join's handshake is not recorded,
        // so its retransmission is answered (again, or when the room is placed).
        let parked = ParkedJoin(value: (accepted, address, peer))
        switch placeJoin(room: join.room, token: token, decided: decided, resume: { [self] route in
            loop.execute { [self] in
                guard !isShuttingDown else { return }
                let (accepted, address, peer) = parked.value
                receiveSecureJoin(accepted, size: size, from: address, peer: peer, existing: sessions[peer], now: monotonicNanoseconds(), decided: route)
            }
        }) {
        case .admit: break
        case .parked: return
        case let .redirect(redirect):
            return answerRedirect(redirect, handshake: accepted, sequence: message.sequence, to: address, size: size, now: now)
        case let .refuse(text):
            metrics.joinRefused(.placementUnavailable)
            return refuse(.placementUnavailable, text, logReason: text)
        }
        // Only a verified join is remembered, so strangers cannot fill the cache, and each
        // source only its share of it.
        switch joins.replayCache.insert(accepted.ephemeralKey, source: peer.host.bytes, unixSeconds: UInt64(unixSeconds())) {
        case .accepted:
            break
        case .replayed:
            return drop(.handshakeReplayed)
        case .sourceOverQuota:
            metrics.joinRefused(.rateLimited)
            return refuse(.rateLimited, "too many joins from your network in the last minutes",
                          logReason: "handshake replay cache share of \(peer.host) spent")
        }
        let endToEnd: Bool
        switch endToEndEncryption(for: join, token: token) {
        case let .success(decided): endToEnd = decided
        case let .failure(refusal):
            metrics.joinRefused(.endToEndEncryptionRequired)
            return refuse(.endToEndEncryptionRequired, refusal.text, logReason: refusal.text)
        }
        let session = makeSession(join, sequence: message.sequence, token: token, endToEnd: endToEnd, address: address, peer: peer, now: now)
        var handshake = accepted
        guard let (response, secureSession) = try? handshake.respond(
            relayIndex: UInt32.random(in: 1 ... .max), payload: session.joinedMessage, nowNanoseconds: now),
              response.count <= size else {
            return drop(.handshakeFailed)
        }
        session.secure(with: PacketProtector(session: secureSession), ephemeralKey: accepted.ephemeralKey, response: response)
        switch admit(session, replacing: existing, software: join.software, now: now) {
        case let .refused(code, text):
            refuse(code, text, logReason: text)
        case .admitted:
            send(response, to: address, kind: .control)
        }
    }

    /// A hello on a relay started `--insecure`: say so, in no more bytes than the hello, echoing
    /// its nonce so the client can tell this answer is about its own hello.
    func refuseHandshakeOnInsecureRelay(_ buffer: ByteBuffer, from address: DatagramAddress, peer: PeerAddress, now: UInt64) {
        drop(.unknownKind)
        guard let hello = buffer.withUnsafeReadableBytes({ try? HandshakeHello(parsing: $0) }),
              peer.canBeAnswered, budgets.errorReplies.allow(peer.host, nowNanoseconds: now) else { return }
        sendError(.encryptionUnavailable, "this relay runs without encryption (--insecure)", echo: hello.nonceBytes, to: address, limit: buffer.readableBytes)
    }

    /// The member proved its address: it gets the roster and media, the others a new roster.
    func activate(_ session: Session, now: UInt64) {
        guard rooms.activate(session, now: now) else { return }
        session.state = .active
        session.gauges = metrics.makeStreamGauges(room: session.room, identity: session.identity)
        membershipLogs.log(.info, "member active", metadata: ["member": "\(session.logDescription)"], now: now)
    }
}
