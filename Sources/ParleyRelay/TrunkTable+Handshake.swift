import ParleyBasics
import ParleyDatagrams
import ParleySecurity
import ParleyWire

/// A trunk's handshake at the loop: opening one (hello, cookie, trunk init, response) and
/// accepting one from a trusted relay; once open, the trunk is a leg like any other.
///
/// A trunk init is taken only from the address a trusted relay is registered at (a
/// stranger's ends before any Diffie-Hellman, `trunk_unknown_source`); from there it costs
/// what a client's does before anything is kept: the address cookie (an HMAC), the source's
/// trunk budget, one Diffie-Hellman that reveals the opener's key, and only for a trusted key
/// the second one (``RelayHandshake/openTrunk(_:trusts:)``).
extension TrunkTable {
    // MARK: Opening a trunk (this relay opens)

    /// Starts opening `room`'s trunk to `peer` from this loop's socket; the answers may
    /// arrive on any loop, which carries on (``TrunkDirectory``).
    func beginTrunk(room: String, to peer: RelayPeer, destination: DatagramAddress) {
        guard let hello = directory.beginOpening(room: room, peer: peer, destination: destination, now: MonotonicClock.now()) else { return }
        context.channel.send(hello, to: destination, kind: .control)
        context.channel.flush()
    }

    /// A cookie reply can only answer a hello this relay sent to open a trunk.
    func receiveCookie(_ datagram: InboundDatagram, now: UInt64) {
        guard let answer = directory.cookieArrived(datagram.readable, now: now) else { return context.drop(.unexpectedControl) }
        for failed in answer.failed {
            context.logger.warning("\(failed)")
            directory.emit(failed)
        }
        for opening in answer.sends { context.channel.send(opening.bytes, to: opening.destination, kind: .control) }
    }

    func receiveTrunkResponse(_ datagram: InboundDatagram, now: UInt64) {
        guard let answer = directory.responseArrived(datagram.readable, now: now) else { return context.drop(.handshakeFailed) }
        switch answer {
        case let .refused(event):
            context.logger.warning("\(event)")
            directory.emit(event)
        case let .accepted(room, relay, session, localIndex, _):
            let trunk = TrunkLeg(
                id: context.rooms.makeLegID(), room: room, peer: relay, destination: datagram.source, peerAddress: datagram.peer,
                localIndex: localIndex, transport: NoiseTransport(session: session), openedHere: true, workerIndex: context.index,
                ephemeralKey: [], handshakeResponse: [], limits: context.limits, nowNanoseconds: now)
            if case let .refused(_, text) = start(trunk, now: now) {
                // The peer holds the trunk open: tell it this end could not.
                legs.sendControl(.leave(.init()), sequence: trunk.takeSequence(), to: trunk)
                let event = TrunkEvent(room: room, peer: relay, openedHere: true, change: .ended(.refused("here: \(text)")))
                context.logger.warning("\(event)")
                directory.emit(event)
            }
        }
    }

    // MARK: Accepting a trunk (the peer opens)

    func receiveTrunkInit(_ datagram: InboundDatagram, now: UInt64) {
        guard let handshake = joins.handshake, !context.isShuttingDown else { return context.drop(.unexpectedControl) }
        let peer = datagram.peer
        let address = datagram.source
        guard directory.acceptsTrunkInit(from: peer.host) else { return context.drop(.trunkUnknownSource) }
        let size = datagram.wireSize
        let unixTime = UInt64(WallClock.seconds())
        let accepted: AcceptedTrunkHandshake
        do throws(SecurityError) {
            let message = try handshake.checkCookie(datagram.readable, address: peer.cookieBytes, unixSeconds: unixTime, type: .trunkInit)
            guard context.budgets.trunkAttempts.allow(peer.host, nowNanoseconds: now) else { return context.drop(.joinRateLimited) }
            accepted = try handshake.openTrunk(message, trusts: directory.isTrusted)
        } catch .invalidCookie {
            return context.drop(.cookieInvalid)
        } catch .untrustedPeer {
            context.refusalLogs.log(.notice, "trunk refused: the opening relay's key is not in the trusted-relay set", metadata: ["from": "\(peer)"],
                                    now: now)
            return context.drop(.trunkUntrusted)
        } catch {
            return context.drop(.handshakeFailed)
        }
        // A retransmitted init (the response was lost) gets the same response again.
        if let existing = byRoute.values.first(where: { $0.ephemeralKey == accepted.ephemeralKey }) {
            if existing.handshakeResponse.count <= size { context.channel.send(existing.handshakeResponse, to: address, kind: .control) }
            return
        }
        guard case .accepted = joins.replayCache.insert(accepted.ephemeralKey, source: peer.host.bytes, unixSeconds: unixTime) else {
            return context.drop(.handshakeReplayed)
        }
        guard let opening = accepted.payload.withUnsafeBytes({ try? TrunkOpening(parsing: $0) }), let source = address.socketAddress,
              let host = source.ipAddress, let port = source.port else {
            return context.drop(.malformed)
        }
        let relay = RelayPeer(address: HostAndPort(host: host, port: port), publicKey: accepted.peerPublicKey)
        var refusal = accepted
        func refuse(_ text: String) {
            let error = ControlMessage(body: .error(.init(code: .rateLimited, message: text)))
            guard let payload = try? error.serialized(),
                  let (response, _) = try? refusal.respond(localIndex: 0, payload: payload, nowNanoseconds: now), response.count <= size else { return }
            context.channel.send(response, to: address, kind: .control)
        }
        switch directory.inbound(room: opening.room, peerKey: relay.publicKey) {
        case let .refuse(text):
            return refuse(text)
        case let .accept(replacing):
            if let replacing { context.rooms.endTrunk(replacing.trunk, reason: .replaced) }
        }
        var answering = accepted
        let localIndex = UInt32.random(in: 1...UInt32.max)
        guard let payload = try? ControlMessage(body: .ack(.init(sequence: 0))).serialized(),
              let (response, session) = try? answering.respond(localIndex: localIndex, payload: payload, nowNanoseconds: now),
              response.count <= size else {
            return context.drop(.handshakeFailed)
        }
        let trunk = TrunkLeg(
            id: context.rooms.makeLegID(), room: opening.room, peer: relay, destination: address, peerAddress: peer, localIndex: localIndex,
            transport: NoiseTransport(session: session), openedHere: false, workerIndex: context.index, ephemeralKey: accepted.ephemeralKey,
            handshakeResponse: response, limits: context.limits, nowNanoseconds: now)
        if case let .refused(_, text) = start(trunk, now: now) { return refuse(text) }
        context.channel.send(response, to: address, kind: .control)
    }

    /// An open trunk joins its room and this loop; nothing is kept if the room refuses it.
    private func start(_ trunk: TrunkLeg, now: UInt64) -> RoomAdmission {
        if let replaced = directory.register(trunk) { context.rooms.endTrunk(replaced.trunk, reason: .replaced) }
        add(trunk)
        trunk.nextReportNanoseconds = now
        let admission = context.rooms.attach(trunk, now: now)
        if case .refused = admission {
            trunk.state = .closed
            remove(trunk)
            directory.unregister(trunk)
            return admission
        }
        context.logger.info("\(trunk.logDescription) opened")
        directory.emit(TrunkEvent(room: trunk.room, peer: trunk.peerRelay, openedHere: trunk.openedHere, change: .opened))
        return admission
    }
}
