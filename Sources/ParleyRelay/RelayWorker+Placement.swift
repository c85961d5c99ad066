import ParleyBasics
import ParleySecurity
import ParleyWire

/// Joins on a relay of a cluster: a verified join is admitted only for a room this relay
/// hosts. For a room on another relay it is answered with a redirect (inside the handshake
/// response, so the client knows the pinned relay wrote it); for a room nobody hosts yet
/// it is parked while the ``RoomPlacement`` (the cluster) places the room, then handled again
/// on this loop. A relay without one admits every join, as it always did.
extension RelayWorker {
    enum PlacementDecision {
        case admit
        case redirect(ControlMessage.Redirect)
        /// Handled again through `resume` once the room is placed.
        case parked
        case refuse(String)
    }

    /// Where the join for `room` goes. `decided` is the answer a parked join resumes with.
    func placeJoin(room: String, token: AccessToken, decided: PlacementRoute?,
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
            metrics.clusterRedirects.increment()
            let others = placement.fallbacks(limit: 4).filter { $0.address != relay.address }
            return .redirect(ControlMessage.Redirect(room: room, relay: relay, others: others))
        }
    }

    /// Other relays of the cluster for a `joined` answer, so the member can fall back.
    var clusterFallbacks: [ControlMessage.ClusterRelay] {
        placement?.fallbacks(limit: 4) ?? []
    }

    /// Answers an encrypted join with a redirect, inside the handshake response. No session
    /// is made and the handshake is not recorded: a retransmitted init is answered again.
    func answerRedirect(_ redirect: ControlMessage.Redirect, handshake accepted: AcceptedHandshake, sequence: UInt32,
                        to address: DatagramAddress, size: Int, now: UInt64) {
        var handshake = accepted
        let message = ControlMessage(sequence: sequence, body: .redirect(redirect))
        guard let payload = try? message.serialized(),
              let (response, _) = try? handshake.respond(relayIndex: 0, payload: payload, nowNanoseconds: now),
              response.count <= size else {
            return drop(.malformed)
        }
        membershipLogs.log(.info, "join redirected to the room's relay", metadata: ["room": "\(redirect.room.logSafe())", "relay": "\(redirect.relay.address)"], now: now)
        send(response, to: address, kind: .control)
    }

    /// A plaintext join's redirect (relays started `--insecure`), never larger than the join.
    func answerRedirect(_ redirect: ControlMessage.Redirect, sequence: UInt32, to address: DatagramAddress, size: Int, now: UInt64) {
        guard let bytes = try? ControlMessage(sequence: sequence, body: .redirect(redirect)).serialized(), bytes.count <= size else {
            return drop(.malformed)
        }
        membershipLogs.log(.info, "join redirected to the room's relay", metadata: ["room": "\(redirect.room.logSafe())", "relay": "\(redirect.relay.address)"], now: now)
        send(bytes, to: address, kind: .control)
    }
}

/// A join parked while its room is placed, carried back to the loop it came from. Made and
/// used on that loop only; it crosses to the cluster's thread and back untouched.
struct ParkedJoin<Value>: @unchecked Sendable {
    let value: Value
}
