import ParleyDatagrams
import ParleyWire

/// Members that left recently, by address, kept a few seconds so the relay can retransmit
/// its goodbye until the member acknowledges it, and acknowledge a retransmitted leave whose
/// first ack was lost (the address was proven, so answering it is safe). Plain state with
/// time passed in, confined to one loop.
struct Departures {
    static let lifetimeNanoseconds: UInt64 = 10_000_000_000

    struct Departure {
        let sessionID: UInt64
        var goodbye: ReliableSender
        let expiresNanoseconds: UInt64
        let destination: DatagramAddress
        /// The departed member's transport: its goodbye is sealed, and so is its ack.
        let transport: any LegTransport
    }

    /// A goodbye due to a member's address, sealed with its keys.
    struct Resend {
        let bytes: [UInt8]
        let destination: DatagramAddress
        let transport: any LegTransport
    }

    private var departures: [PeerAddress: Departure] = [:]

    /// The goodbye `member` is told (nil when `reason` has none or it is not to be told), as
    /// a reliable message: retransmitted until acknowledged, except to an idle member, who is
    /// told once since it is probably gone. `text` replaces the reason's own words (a
    /// moderator's, for a kick).
    static func goodbye(to member: MemberLeg, reason: RemovalReason, text: String? = nil, tellMember: Bool, now: UInt64) -> (sender: ReliableSender, bytes: [UInt8]?) {
        var sender = ReliableSender()
        guard tellMember, let goodbyeReason = reason.goodbye else { return (sender, nil) }
        let sequence = member.takeSequence()
        // A goodbye's text is a string8: cut at a character boundary within 255 bytes.
        var words = text ?? reason.goodbyeText
        while words.utf8.count > 255 { words.removeLast() }
        let message = ControlMessage(sequence: sequence, isReliable: true, body: .goodbye(ControlMessage.Goodbye(reason: goodbyeReason, message: words)))
        guard let bytes = try? message.serialized() else { return (sender, nil) }
        sender.enqueue(sequence: sequence, kind: .goodbye, bytes: bytes, nowNanoseconds: now,
                       attempts: reason == .idleTimeout ? 1 : ReliableSender.maximumAttempts)
        return (sender, bytes)
    }

    mutating func record(_ member: MemberLeg, goodbye: ReliableSender, now: UInt64) {
        departures[member.peer] = Departure(
            sessionID: member.id, goodbye: goodbye, expiresNanoseconds: now &+ Self.lifetimeNanoseconds,
            destination: member.destination, transport: member.transport)
    }

    subscript(peer: PeerAddress) -> Departure? { departures[peer] }

    mutating func acknowledge(_ peer: PeerAddress, sequence: UInt32) {
        departures[peer]?.goodbye.acknowledge(sequence: sequence)
    }

    /// Forgets what has expired and returns the goodbyes due for retransmission.
    mutating func due(now: UInt64) -> [Resend] {
        var resends: [Resend] = []
        for (peer, departure) in departures {
            if now >= departure.expiresNanoseconds {
                departures[peer] = nil
                continue
            }
            var goodbye = departure.goodbye
            for bytes in goodbye.due(nowNanoseconds: now) {
                resends.append(Resend(bytes: bytes, destination: departure.destination, transport: departure.transport))
            }
            departures[peer]!.goodbye = goodbye
        }
        return resends
    }

    /// Goodbyes still unacknowledged.
    var unacknowledgedGoodbyes: Int {
        departures.values.reduce(0) { $0 + ($1.goodbye.isEmpty ? 0 : 1) }
    }
}
