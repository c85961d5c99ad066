import NIOCore
import ParleySecurity
import ParleyWire

/// A trunk's handshake at the loop: opening one (hello, cookie, trunk init, response) and
/// accepting one from a trusted relay; once started, the trunk is `RelayWorker+Trunks.swift`'s.
///
/// A trunk init is taken only from the address a trusted relay is registered at (a
/// stranger's ends before any Diffie-Hellman, `trunk_unknown_source`); from there it costs
/// what a client's does before anything is kept: the address cookie (an HMAC), the source's
/// trunk budget, one Diffie-Hellman that reveals the opener's key, and only for a trusted key
/// the second one (``RelayHandshake/openTrunk(_:trusts:)``).
extension RelayWorker {
    // MARK: Opening a trunk (this relay opens)

    /// Starts opening `room`'s trunk to `peer` from this loop's socket; the answers may
    /// arrive on any loop, which carries on (``TrunkDirectory``).
    func beginTrunk(room: String, to peer: RelayPeer, destination: DatagramAddress) {
        guard let trunkDirectory,
              let hello = trunkDirectory.beginOpening(room: room, peer: peer, destination: destination, now: monotonicNanoseconds()) else { return }
        send(hello, to: destination, kind: .control)
        flush()
    }

    /// A cookie reply can only answer a hello this relay sent to open a trunk.
    func receiveTrunkCookie(_ buffer: ByteBuffer, from address: DatagramAddress, now: UInt64) {
        guard let trunkDirectory,
              let answer = buffer.withUnsafeReadableBytes({ trunkDirectory.cookieArrived($0, now: now) }) else {
            return drop(.unexpectedControl)
        }
        for failed in answer.failed {
            logger.warning("\(failed)")
            trunkDirectory.emit(failed)
        }
        for opening in answer.sends { send(opening.bytes, to: opening.destination, kind: .control) }
    }

    func receiveTrunkResponse(_ buffer: ByteBuffer, from address: DatagramAddress, peer: PeerAddress, now: UInt64) {
        guard let trunkDirectory,
              let answer = buffer.withUnsafeReadableBytes({ trunkDirectory.responseArrived($0, now: now) }) else {
            return drop(.handshakeFailed)
        }
        switch answer {
        case let .refused(event):
            logger.warning("\(event)")
            trunkDirectory.emit(event)
        case let .accepted(room, relay, session, localIndex, _):
            let trunk = Trunk(
                id: rooms.makeSessionID(), room: room, peer: relay, destination: address, peerAddress: peer, localIndex: localIndex,
                protector: PacketProtector(session: session), openedHere: true, workerIndex: index, ephemeralKey: [],
                handshakeResponse: [], limits: limits, nowNanoseconds: now)
            if case let .refused(_, text) = start(trunk, now: now) {
                // The peer holds the trunk open: tell it this end could not.
                sendToTrunk(.leave(.init()), trunk: trunk)
                let event = TrunkEvent(room: room, peer: relay, openedHere: true, change: .ended(.refused("here: \(text)")))
                logger.warning("\(event)")
                trunkDirectory.emit(event)
            }
        }
    }

    // MARK: Accepting a trunk (the peer opens)

    func receiveTrunkInit(_ buffer: ByteBuffer, from address: DatagramAddress, peer: PeerAddress, now: UInt64) {
        guard let trunkDirectory, let handshake = joins.handshake, !isShuttingDown else { return drop(.unexpectedControl) }
        guard trunkDirectory.acceptsTrunkInit(from: peer.host) else { return drop(.trunkUnknownSource) }
        let size = buffer.readableBytes
        let unixTime = UInt64(unixSeconds())
        enum Outcome { case opened(AcceptedTrunkHandshake), overBudget, refused(SecurityError) }
        let outcome: Outcome = buffer.withUnsafeReadableBytes { raw in
            do throws(SecurityError) {
                let message = try handshake.checkCookie(raw, address: peer.cookieBytes, unixSeconds: unixTime, type: .trunkInit)
                guard budgets.trunkAttempts.allow(peer.host, nowNanoseconds: now) else { return .overBudget }
                return .opened(try handshake.openTrunk(message, trusts: trunkDirectory.isTrusted))
            } catch {
                return .refused(error)
            }
        }
        let accepted: AcceptedTrunkHandshake
        switch outcome {
        case let .opened(opened): accepted = opened
        case .overBudget: return drop(.joinRateLimited)
        case .refused(.invalidCookie): return drop(.cookieInvalid)
        case .refused(.untrustedPeer):
            refusalLogs.log(.notice, "trunk refused: the opening relay's key is not in the trusted-relay set", metadata: ["from": "\(peer)"], now: now)
            return drop(.trunkUntrusted)
        case .refused: return drop(.handshakeFailed)
        }
        // A retransmitted init (the response was lost) gets the same response again.
        if let existing = trunks.values.first(where: { $0.ephemeralKey == accepted.ephemeralKey }) {
            if existing.handshakeResponse.count <= size { send(existing.handshakeResponse, to: address, kind: .control) }
            return
        }
        guard case .accepted = joins.replayCache.insert(accepted.ephemeralKey, source: peer.host.bytes, unixSeconds: unixTime) else {
            return drop(.handshakeReplayed)
        }
        guard let opening = accepted.payload.withUnsafeBytes({ try? TrunkOpening(parsing: $0) }), let source = address.socketAddress,
              let host = source.ipAddress, let port = source.port else {
            return drop(.malformed)
        }
        let relay = RelayPeer(address: HostAndPort(host: host, port: port), publicKey: accepted.peerPublicKey)
        var refusal = accepted
        func refuse(_ text: String) {
            let error = ControlMessage(body: .error(.init(code: .rateLimited, message: text)))
            guard let payload = try? error.serialized(),
                  let (response, _) = try? refusal.respond(localIndex: 0, payload: payload, nowNanoseconds: now), response.count <= size else { return }
            send(response, to: address, kind: .control)
        }
        switch trunkDirectory.inbound(room: opening.room, peerKey: relay.publicKey) {
        case let .refuse(text):
            return refuse(text)
        case let .accept(replacing):
            if let replacing { rooms.endTrunk(replacing.trunk, reason: .replaced) }
        }
        var answering = accepted
        let localIndex = UInt32.random(in: 1...UInt32.max)
        guard let payload = try? ControlMessage(body: .ack(.init(sequence: 0))).serialized(),
              let (response, session) = try? answering.respond(localIndex: localIndex, payload: payload, nowNanoseconds: now),
              response.count <= size else {
            return drop(.handshakeFailed)
        }
        let trunk = Trunk(
            id: rooms.makeSessionID(), room: opening.room, peer: relay, destination: address, peerAddress: peer, localIndex: localIndex,
            protector: PacketProtector(session: session), openedHere: false, workerIndex: index, ephemeralKey: accepted.ephemeralKey,
            handshakeResponse: response, limits: limits, nowNanoseconds: now)
        if case let .refused(_, text) = start(trunk, now: now) { return refuse(text) }
        send(response, to: address, kind: .control)
    }

    /// An open trunk joins its room and this loop; nothing is kept if the room refuses it.
    private func start(_ trunk: Trunk, now: UInt64) -> RoomAdmission {
        guard let trunkDirectory else { return .refused(.encryptionUnavailable, "no relay key") }
        if let replaced = trunkDirectory.register(trunk) { rooms.endTrunk(replaced.trunk, reason: .replaced) }
        trunks[trunk.route] = trunk
        trunk.nextReportNanoseconds = now
        let admission = rooms.attachTrunk(trunk, now: now)
        if case .refused = admission {
            trunk.state = .closed
            trunks[trunk.route] = nil
            trunkDirectory.unregister(trunk)
            return admission
        }
        logger.info("\(trunk.logDescription) opened")
        trunkDirectory.emit(TrunkEvent(room: trunk.room, peer: trunk.peer, openedHere: trunk.openedHere, change: .opened))
        return admission
    }
}
