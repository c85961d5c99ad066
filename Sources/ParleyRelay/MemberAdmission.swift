import ParleyBasics
import ParleyDatagrams
import ParleySecurity
import ParleyWire

/// Everything that arrives from no leg: strangers, plaintext joins (relays started
/// `--insecure`) and the Noise handshake that carries a join, checked by ``JoinVerifier``,
/// placed in a cluster (``RoomPlacement``), admitted to its room through ``RoomMembership`` and
/// handed to ``MemberTable``. A trunk's handshake messages go on to ``TrunkTable``.
///
/// Strangers' work is kept cheap and bounded: nothing is answered with more bytes than came
/// in, every answer is charged to the source's ``AdmissionBudgets``, and a handshake's costly
/// steps come only after the cheap proofs (``receiveHandshake(_:now:)``).
///
/// One loop's thread only; nothing here is locked.
final class MemberAdmission: @unchecked Sendable {
    private let context: LoopContext
    private let legs: LegHandler
    private let members: MemberTable
    private let trunks: TrunkTable?
    let joins: JoinVerifier
    /// Where rooms live, in a cluster; nil on a relay on its own, which admits every join.
    let placement: (any RoomPlacement)?

    init(context: LoopContext, legs: LegHandler, members: MemberTable, trunks: TrunkTable?, joins: JoinVerifier, placement: (any RoomPlacement)?) {
        self.context = context
        self.legs = legs
        self.members = members
        self.trunks = trunks
        self.joins = joins
        self.placement = placement
    }

    private var channel: RelayChannel { context.channel }

    // MARK: Datagrams from no leg

    func receive(_ datagram: inout InboundDatagram, now: UInt64) {
        if joins.handshake != nil {
            receiveOnSecureRelay(&datagram, now: now)
        } else {
            receiveOnInsecureRelay(datagram, now: now)
        }
    }

    /// On a relay that requires encryption, members send only sealed packets after the
    /// handshake; what arrives here is a handshake, a departed member's, or a stranger's.
    private func receiveOnSecureRelay(_ datagram: inout InboundDatagram, now: UInt64) {
        let size = datagram.wireSize
        switch datagram.kind {
        case .handshake:
            receiveHandshake(datagram, now: now)
        case .sealed:
            guard members.member(at: datagram.peer) == nil else { return context.drop(.unknownKind) }
            if members.receiveFromDeparted(&datagram, now: now) { return }
            context.drop(.notJoined)
            // The reply echoes the packet's tag, which a client checks against what it sent:
            // a "not joined" forged by someone who never saw its packets cannot end its session.
            answerStranger(datagram.peer, address: datagram.source, receivedSize: size, echo: datagram.sealedTag, now: now)
        case .control:
            // A plaintext join gets told why (a client run with --insecure); nothing else is answered.
            context.drop(.plaintextRefused)
            guard let message = try? ControlMessage(parsing: datagram.readable), case .join = message.body, datagram.peer.canBeAnswered,
                  context.budgets.errorReplies.allow(datagram.peer.host, nowNanoseconds: now) else { return }
            sendError(.encryptionRequired, "this relay accepts encrypted clients only: use an invite with a key= and no --insecure",
                      sequence: message.sequence, to: datagram.source, limit: size)
        case .rtp, .rtcp:
            context.drop(.plaintextRefused)
            if members.member(at: datagram.peer) == nil { answerStranger(datagram.peer, address: datagram.source, receivedSize: size, echo: [], now: now) }
        case .stun, .dtls, .unknown:
            context.drop(.unknownKind)
        }
    }

    /// On an `--insecure` relay: a stranger's packet, a join, or what no plaintext leg carries.
    private func receiveOnInsecureRelay(_ datagram: InboundDatagram, now: UInt64) {
        let isMember = members.member(at: datagram.peer) != nil
        switch datagram.kind {
        case .rtp where isMember, .rtcp where isMember:
            // A browser member's SRTP before its DTLS handshake is done.
            context.drop(.notActive)
        case .rtp, .rtcp:
            context.drop(.notJoined)
            answerStranger(datagram.peer, address: datagram.source, receivedSize: datagram.wireSize, echo: [], now: now)
        case .control where !isMember:
            receiveStrangerControl(datagram, now: now)
        case .handshake:
            refuseHandshakeOnInsecureRelay(datagram, now: now)
        case .control, .sealed, .stun, .dtls, .unknown:
            context.drop(.unknownKind)
        }
    }

    private func receiveStrangerControl(_ datagram: InboundDatagram, now: UInt64) {
        guard let message = try? ControlMessage(parsing: datagram.readable) else { return context.drop(.malformed) }
        switch message.body {
        case .join:
            receiveJoin(message, size: datagram.wireSize, from: datagram.source, peer: datagram.peer, existing: nil, now: now)
        case .leave, .ack:
            members.receiveDepartedControl(message, peer: datagram.peer)
        case .ready, .ping:
            context.drop(.notJoined)
            answerStranger(datagram.peer, address: datagram.source, receivedSize: datagram.wireSize, echo: [], now: now)
        case .joined, .roster, .pong, .error, .goodbye, .moderate, .moderationReply, .redirect, .memberState, .text, .mediaKeys:
            context.drop(.notJoined)
        }
    }

    /// Tells a stranger it is not a member, so a client whose relay restarted rejoins at once;
    /// never with more bytes than it sent, and rate-limited per source and overall. `echo`
    /// (the tag of the sealed packet answered) lets the client know the reply is about its own packet.
    private func answerStranger(_ peer: PeerAddress, address: DatagramAddress, receivedSize: Int, echo: [UInt8], now: UInt64) {
        guard peer.canBeAnswered, context.budgets.errorReplies.allow(peer.host, nowNanoseconds: now) else { return }
        sendError(.notJoined, "not a member here: join again (the relay may have restarted)", echo: echo, to: address, limit: receivedSize)
    }

    /// An error reply to a stranger, cut to `limit` bytes (``ControlReply/error(_:_:sequence:echo:limit:)``).
    private func sendError(_ code: ControlMessage.ErrorCode, _ text: String, sequence: UInt32 = 0, echo: [UInt8] = [],
                           to address: DatagramAddress, limit: Int) {
        guard let bytes = ControlReply.error(code, text, sequence: sequence, echo: echo, limit: limit) else { return }
        channel.send(bytes, to: address, kind: .control)
    }

    /// A hello on a relay started `--insecure`: say so, in no more bytes than the hello, echoing
    /// its nonce so the client can tell this answer is about its own hello.
    private func refuseHandshakeOnInsecureRelay(_ datagram: InboundDatagram, now: UInt64) {
        context.drop(.unknownKind)
        guard let hello = try? HandshakeHello(parsing: datagram.readable), datagram.peer.canBeAnswered,
              context.budgets.errorReplies.allow(datagram.peer.host, nowNanoseconds: now) else { return }
        sendError(.encryptionUnavailable, "this relay runs without encryption (--insecure)", echo: hello.nonceBytes, to: datagram.source,
                  limit: datagram.wireSize)
    }

    // MARK: Plaintext joins

    /// A plaintext join (relays started `--insecure`).
    func receiveJoin(_ message: ControlMessage, size: Int, from address: DatagramAddress, peer: PeerAddress, existing: MemberLeg?, now: UInt64,
                     decided: PlacementRoute? = nil) {
        guard case let .join(join) = message.body else { return }
        // Joins are padded so the answer is never larger than the question; a short one is
        // not from a Parley client and gets no answer at all.
        guard size >= ControlMessage.minimumJoinSize else { return context.drop(.malformed) }
        guard !context.isShuttingDown else { return }
        if let existing, existing.ssrc == join.ssrc, existing.room == join.room, existing.token == join.token {
            // A retransmitted join: the same answer, same cookie.
            existing.lastHeardNanoseconds = now
            if existing.joinedMessage.count <= size { channel.send(existing.joinedMessage, to: address, kind: .control) }
            return
        }
        // A parked join spent its budget when it first came.
        guard decided != nil || context.budgets.joinAttempts.allow(peer.host, nowNanoseconds: now) else { return context.drop(.joinRateLimited) }
        let token: AccessToken
        switch joins.verify(join, unixSeconds: WallClock.seconds()) {
        case let .refused(code, text, logReason):
            context.metrics.joinRefused(code)
            return refuseJoin(code, message: text, logReason: logReason, sequence: message.sequence, peer: peer, address: address, size: size, now: now)
        case let .verified(verified):
            token = verified
        }
        let parked = ParkedJoin(value: (message, address, peer))
        switch placeJoin(room: join.room, token: token, decided: decided, resume: { [self] route in
            context.loop.execute { [self] in
                guard !context.isShuttingDown else { return }
                let (message, address, peer) = parked.value
                receiveJoin(message, size: size, from: address, peer: peer, existing: members.member(at: peer), now: MonotonicClock.now(), decided: route)
            }
        }) {
        case .admit: break
        case .parked: return
        case let .redirect(redirect): return answerRedirect(redirect, sequence: message.sequence, to: address, size: size, now: now)
        case let .refuse(text):
            context.metrics.joinRefused(.placementUnavailable)
            return refuseJoin(.placementUnavailable, message: text, logReason: text, sequence: message.sequence, peer: peer, address: address,
                              size: size, now: now)
        }
        let endToEnd: Bool
        switch endToEndEncryption(for: join, token: token) {
        case let .success(decided): endToEnd = decided
        case let .failure(refusal):
            context.metrics.joinRefused(.endToEndEncryptionRequired)
            return refuseJoin(.endToEndEncryptionRequired, message: refusal.text, logReason: refusal.text, sequence: message.sequence, peer: peer,
                              address: address, size: size, now: now)
        }
        let member = makeMember(join, sequence: message.sequence, token: token, endToEnd: endToEnd, address: address, peer: peer, now: now)
        switch admit(member, replacing: existing, software: join.software, now: now) {
        case let .refused(code, text):
            refuseJoin(code, message: text, logReason: text, sequence: message.sequence, peer: peer, address: address, size: size, now: now)
        case .admitted:
            if member.joinedMessage.count <= size { channel.send(member.joinedMessage, to: address, kind: .control) }
        }
    }

    struct EndToEndRefusal: Error {
        let text: String
    }

    /// Whether the join's room is end-to-end encrypted (what its `joined` says), or why the
    /// join cannot come in: a room that is, and a client that cannot take part; or a token that
    /// asks for it, and a room already running without.
    private func endToEndEncryption(for join: ControlMessage.Join, token: AccessToken) -> Result<Bool, EndToEndRefusal> {
        let endToEnd = context.rooms.isEndToEndEncrypted(join.room, tokenAsks: token.endToEndEncrypted)
        let takesPart = join.capabilities.contains(.endToEndEncryption) && join.identityKey.count == ControlMessage.identityKeySize
        if let problem = Room.endToEndProblem(room: join.room, endToEnd: endToEnd, tokenAsks: token.endToEndEncrypted, clientTakesPart: takesPart) {
            return .failure(EndToEndRefusal(text: problem))
        }
        return .success(endToEnd)
    }

    /// A member's leg for a verified join, with its `joined` answer ready. In an end-to-end
    /// encrypted room the member's identity key goes in the roster; elsewhere it is not kept.
    private func makeMember(
        _ join: ControlMessage.Join, sequence: UInt32, token: AccessToken, endToEnd: Bool, address: DatagramAddress, peer: PeerAddress, now: UInt64
    ) -> MemberLeg {
        let limits = context.limits
        let member = MemberLeg(
            id: context.rooms.makeLegID(), address: address, peer: peer, room: join.room, identity: token.identity,
            ssrc: join.ssrc, canPublish: token.canPublish, isModerator: token.isModerator, capabilities: join.capabilities,
            identityKey: endToEnd ? join.identityKey : [], isEndToEndEncrypted: endToEnd, cookie: UInt64.random(in: 1 ... .max), token: join.token,
            workerIndex: context.index, limits: limits, nowNanoseconds: now)
        var joined = ControlMessage.Joined(
            cookie: member.cookie, ssrc: member.ssrc, identity: member.identity, room: member.room,
            canPublish: member.canPublish, isEndToEndEncrypted: endToEnd,
            keepaliveIntervalMilliseconds: UInt32(limits.keepaliveIntervalMilliseconds),
            idleTimeoutMilliseconds: UInt32(limits.idleTimeoutMilliseconds), clusterRelays: clusterFallbacks)
        // The identity and room are checked, so only the fallbacks (from the store) can fail to
        // serialise: then the answer goes without them, never empty.
        if let bytes = try? ControlMessage(sequence: sequence, body: .joined(joined)).serialized() {
            member.joinedMessage = bytes
        } else {
            joined.clusterRelays = []
            member.joinedMessage = (try? ControlMessage(sequence: sequence, body: .joined(joined)).serialized()) ?? []
        }
        return member
    }

    /// Puts `member` in its room (limits, SSRC, identity), ending `existing` — a member from
    /// the same address — and any member of the same identity elsewhere.
    func admit(_ member: MemberLeg, replacing existing: MemberLeg?, software: String, now: UInt64) -> RoomAdmission {
        if let existing {
            // The same address joins afresh (a new SSRC, token or handshake): the old leg
            // ends quietly, since the client that would hear its goodbye is the one joining.
            members.remove(existing, reason: .replaced, now: now, tellMember: false)
        }
        switch context.rooms.attach(member, now: now) {
        case let .refused(code, text):
            context.metrics.joinRefused(code)
            return .refused(code, text)
        case let .admitted(replaced):
            members.add(member)
            context.metrics.joinsAccepted.increment()
            context.membershipLogs.log(.info, "member joining", metadata: [
                "member": "\(member.logDescription)", "software": "\(software.logSafe())",
                "publish": "\(member.canPublish)", "encrypted": "\(member.transport.isSecure)",
            ], now: now)
            if let replaced {
                context.membershipLogs.log(.info, "member replaced by a new session", metadata: ["member": "\(replaced.logDescription)"], now: now)
            }
            return .admitted(replaced: replaced)
        }
    }

    private func refuseJoin(
        _ code: ControlMessage.ErrorCode, message: String, logReason: String, sequence: UInt32,
        peer: PeerAddress, address: DatagramAddress, size: Int, now: UInt64
    ) {
        context.drop(.notJoined)
        guard peer.canBeAnswered, context.budgets.errorReplies.allow(peer.host, nowNanoseconds: now) else { return }
        context.refusalLogs.log(.notice, "join refused", metadata: ["from": "\(peer)", "reason": "\(logReason.logSafe(limit: 200))"], now: now)
        sendError(code, message, sequence: sequence, to: address, limit: size)
    }

    // MARK: The encrypted handshake

    /// Hello and handshake init. Answers only what checks out, never with more bytes than came
    /// in. An init's cookie is checked first (an HMAC, no state, no budget), then its source's
    /// and the loop's join budget is spent, then the Diffie-Hellman; its handshake is recorded
    /// against replays only once the join inside has verified (``receiveSecureJoin``).
    private func receiveHandshake(_ datagram: InboundDatagram, now: UInt64) {
        guard let handshake = joins.handshake else { return }
        let size = datagram.wireSize
        let peer = datagram.peer
        let address = datagram.source
        guard peer.canBeAnswered else { return context.drop(.malformed) }
        let unixTime = UInt64(WallClock.seconds())
        let raw = datagram.readable
        switch raw.first.flatMap(SecureMessageType.init(rawValue:)) {
        case .hello:
            guard context.budgets.cookieReplies.allow(peer.host, nowNanoseconds: now) else { return context.drop(.helloRateLimited) }
            guard let reply = handshake.cookieReply(toHello: raw, address: peer.cookieBytes, unixSeconds: unixTime), reply.count <= size else {
                return context.drop(.malformed)
            }
            channel.send(reply, to: address, kind: .control)
        case .handshakeInit:
            guard !context.isShuttingDown else { return }
            let existing = members.member(at: peer)
            let accepted: AcceptedHandshake
            do throws(SecurityError) {
                let message = try handshake.checkCookie(raw, address: peer.cookieBytes, unixSeconds: unixTime)
                guard context.budgets.joinAttempts.allow(peer.host, nowNanoseconds: now) else { return context.drop(.joinRateLimited) }
                accepted = try handshake.open(message)
            } catch .invalidCookie {
                return context.drop(.cookieInvalid)
            } catch {
                return context.drop(.handshakeFailed)
            }
            if joins.replayCache.contains(accepted.ephemeralKey, unixSeconds: unixTime) {
                // A retransmitted init (its response was lost) gets the same response again; a
                // replay of one whose session is gone gets nothing.
                if let existing, let made = existing.handshake, made.ephemeralKey == accepted.ephemeralKey, made.response.count <= size {
                    channel.send(made.response, to: address, kind: .control)
                } else {
                    context.drop(.handshakeReplayed)
                }
                return
            }
            receiveSecureJoin(accepted, size: size, from: address, peer: peer, existing: existing, now: now)
        case .cookie:
            guard let trunks else { return context.drop(.unexpectedControl) }
            trunks.receiveCookie(datagram, now: now)
        case .trunkInit:
            guard let trunks else { return context.drop(.unexpectedControl) }
            trunks.receiveTrunkInit(datagram, now: now)
        case .trunkResponse:
            guard let trunks else { return context.drop(.handshakeFailed) }
            trunks.receiveTrunkResponse(datagram, now: now)
        default:
            context.drop(.unexpectedControl)
        }
    }

    /// The join inside an accepted handshake: the same checks as a plaintext join; the answer
    /// (joined, or the refusal) goes back inside the handshake response, so it is authenticated.
    private func receiveSecureJoin(_ accepted: AcceptedHandshake, size: Int, from address: DatagramAddress, peer: PeerAddress, existing: MemberLeg?,
                                   now: UInt64, decided: PlacementRoute? = nil) {
        guard let message = try? ControlMessage(parsing: accepted.payload), case let .join(join) = message.body else {
            return context.drop(.malformed)
        }
        // Refusals answer with a copy of the accepted handshake, so one can be made whatever happens.
        let refusalHandshake = accepted
        func refuse(_ code: ControlMessage.ErrorCode, _ text: String, logReason: String) {
            context.drop(.notJoined)
            guard context.budgets.errorReplies.allow(peer.host, nowNanoseconds: now) else { return }
            context.refusalLogs.log(.notice, "join refused", metadata: ["from": "\(peer)", "reason": "\(logReason.logSafe(limit: 200))"], now: now)
            var handshake = refusalHandshake
            let error = ControlMessage(sequence: message.sequence, body: .error(ControlMessage.ErrorReply(code: code, message: text)))
            guard let payload = try? error.serialized(),
                  let (response, _) = try? handshake.respond(relayIndex: 0, payload: payload, nowNanoseconds: now),
                  response.count <= size else { return }
            channel.send(response, to: address, kind: .control)
        }

        let token: AccessToken
        switch joins.verify(join, unixSeconds: WallClock.seconds()) {
        case let .refused(code, text, logReason):
            context.metrics.joinRefused(code)
            return refuse(code, text, logReason: logReason)
        case let .verified(verified):
            token = verified
        }
        // Before the replay cache: a redirected or parked join's handshake is not recorded,
        // so its retransmission is answered (again, or when the room is placed).
        let parked = ParkedJoin(value: (accepted, address, peer))
        switch placeJoin(room: join.room, token: token, decided: decided, resume: { [self] route in
            context.loop.execute { [self] in
                guard !context.isShuttingDown else { return }
                let (accepted, address, peer) = parked.value
                receiveSecureJoin(accepted, size: size, from: address, peer: peer, existing: members.member(at: peer), now: MonotonicClock.now(),
                                  decided: route)
            }
        }) {
        case .admit: break
        case .parked: return
        case let .redirect(redirect):
            return answerRedirect(redirect, handshake: accepted, sequence: message.sequence, to: address, size: size, now: now)
        case let .refuse(text):
            context.metrics.joinRefused(.placementUnavailable)
            return refuse(.placementUnavailable, text, logReason: text)
        }
        // Only a verified join is remembered, so strangers cannot fill the cache, and each
        // source only its share of it.
        switch joins.replayCache.insert(accepted.ephemeralKey, source: peer.host.bytes, unixSeconds: UInt64(WallClock.seconds())) {
        case .accepted:
            break
        case .replayed:
            return context.drop(.handshakeReplayed)
        case .sourceOverQuota:
            context.metrics.joinRefused(.rateLimited)
            return refuse(.rateLimited, "too many joins from your network in the last minutes",
                          logReason: "handshake replay cache share of \(peer.host) spent")
        }
        let endToEnd: Bool
        switch endToEndEncryption(for: join, token: token) {
        case let .success(decided): endToEnd = decided
        case let .failure(refusal):
            context.metrics.joinRefused(.endToEndEncryptionRequired)
            return refuse(.endToEndEncryptionRequired, refusal.text, logReason: refusal.text)
        }
        let member = makeMember(join, sequence: message.sequence, token: token, endToEnd: endToEnd, address: address, peer: peer, now: now)
        var handshake = accepted
        guard let (response, session) = try? handshake.respond(
            relayIndex: UInt32.random(in: 1 ... .max), payload: member.joinedMessage, nowNanoseconds: now),
              response.count <= size else {
            return context.drop(.handshakeFailed)
        }
        member.secure(with: NoiseTransport(session: session), ephemeralKey: accepted.ephemeralKey, response: response)
        switch admit(member, replacing: existing, software: join.software, now: now) {
        case let .refused(code, text):
            refuse(code, text, logReason: text)
        case .admitted:
            channel.send(response, to: address, kind: .control)
        }
    }

    // MARK: Placement in a cluster

    enum PlacementDecision {
        case admit
        case redirect(ControlMessage.Redirect)
        /// Handled again through `resume` once the room is placed.
        case parked
        case refuse(String)
    }

    /// Where the join for `room` goes: admitted only for a room this relay hosts; for a room on
    /// another relay, a redirect (inside the handshake response, so the client knows the pinned
    /// relay wrote it); for a room nobody hosts yet, parked while the ``RoomPlacement`` places
    /// it, then handled again on this loop. `decided` is the answer a parked join resumes with.
    private func placeJoin(room: String, token: AccessToken, decided: PlacementRoute?,
                           resume: @escaping @Sendable (PlacementRoute) -> Void) -> PlacementDecision {
        guard let placement else { return .admit }
        let route = decided ?? placement.route(room: room, region: token.region, whenDecided: resume)
        switch route {
        case .here:
            return .admit
        case .pending:
            return .parked
        case let .unavailable(text):
            return .refuse(text)
        case let .elsewhere(relay):
            guard relay.publicKey.isEmpty == !joins.encrypted else {
                return .refuse("the room is on a relay this one cannot send you to (\(joins.encrypted ? "it runs without encryption" : "it runs with encryption, this one without"))")
            }
            context.metrics.clusterRedirects.increment()
            let others = placement.fallbacks(limit: 4).filter { $0.address != relay.address }
            return .redirect(ControlMessage.Redirect(room: room, relay: relay, others: others))
        }
    }

    enum BrowserPlacement: Equatable {
        case ready
        /// The placement is under way: the hello is dropped, and its retransmission asks again.
        case waiting
        case refused(String)
    }

    /// Whether a browser member can join `room` through this relay in its cluster now: a
    /// browser cannot follow a redirect, so the room is joined here, over a trunk to its home
    /// if it lives elsewhere (``RoomPlacement/routePinned(room:whenDecided:)``). Its offer
    /// asked first, which placed a new room or began to; a placement still under way when its
    /// handshake arrives (a slow store, or this relay's view not yet showing where another
    /// relay put the room) makes the handshake wait for the browser's next retransmission.
    func browserPlacement(room: String) -> BrowserPlacement {
        guard let placement else { return .ready }
        switch placement.routePinned(room: room, whenDecided: { _ in }) {
        case .here:
            return .ready
        case .pending:
            return .waiting
        case let .elsewhere(relay):
            context.metrics.joinRefused(.placementUnavailable)
            return .refused("\(room) is hosted on another relay of the cluster (\(relay.address)) that this one cannot join; open the page of that relay")
        case let .unavailable(text):
            context.metrics.joinRefused(.placementUnavailable)
            return .refused(text)
        }
    }

    /// Other relays of the cluster for a `joined` answer, so the member can fall back.
    private var clusterFallbacks: [ControlMessage.ClusterRelay] {
        placement?.fallbacks(limit: 4) ?? []
    }

    /// Answers an encrypted join with a redirect, inside the handshake response. No leg is
    /// made and the handshake is not recorded: a retransmitted init is answered again.
    private func answerRedirect(_ redirect: ControlMessage.Redirect, handshake accepted: AcceptedHandshake, sequence: UInt32,
                                to address: DatagramAddress, size: Int, now: UInt64) {
        var handshake = accepted
        let message = ControlMessage(sequence: sequence, body: .redirect(redirect))
        guard let payload = try? message.serialized(),
              let (response, _) = try? handshake.respond(relayIndex: 0, payload: payload, nowNanoseconds: now),
              response.count <= size else {
            return context.drop(.malformed)
        }
        logRedirect(redirect, now: now)
        channel.send(response, to: address, kind: .control)
    }

    /// A plaintext join's redirect (relays started `--insecure`), never larger than the join.
    private func answerRedirect(_ redirect: ControlMessage.Redirect, sequence: UInt32, to address: DatagramAddress, size: Int, now: UInt64) {
        guard let bytes = try? ControlMessage(sequence: sequence, body: .redirect(redirect)).serialized(), bytes.count <= size else {
            return context.drop(.malformed)
        }
        logRedirect(redirect, now: now)
        channel.send(bytes, to: address, kind: .control)
    }

    private func logRedirect(_ redirect: ControlMessage.Redirect, now: UInt64) {
        context.membershipLogs.log(.info, "join redirected to the room's relay", metadata: [
            "room": "\(redirect.room.logSafe())", "relay": "\(redirect.relay.address)",
        ], now: now)
    }
}

/// A join parked while its room is placed, carried back to the loop it came from. Made and
/// used on that loop only; it crosses to the cluster's thread and back untouched.
struct ParkedJoin<Value>: @unchecked Sendable {
    let value: Value
}
