import ParleyWire

/// The relay's RTCP with one member, decided in plain Swift with time passed in: what the
/// member's own RTCP changes (gauges, its listeners' loss boards, its stream's sender-report
/// time), which of it goes on to the room, and the relay's receiver report about the member's
/// stream. What a packet may contain is ``RTCPTermination``'s concern; the worker parses,
/// asks this, and sends what comes back.
enum MemberRTCP {
    /// Sender reports forwarded per member at most this often (clients send about one a second).
    static let senderReportForwardIntervalNanoseconds: UInt64 = 400_000_000
    static let receiverReportIntervalNanoseconds: UInt64 = 1_000_000_000

    enum Outcome: Equatable {
        case dropped(DropReason)
        /// `nacks`: generic NACKs the relay does not serve; `forward`: the rebuilt sender
        /// report for the member's room, when one is due.
        case accepted(nacks: Int, forward: [UInt8]?)
    }

    /// A member's compound RTCP packet: its report blocks feed its downstream gauges and the
    /// loss boards of the streams it hears; only its own sender report's figures go on, rebuilt.
    static func receive(_ packet: UnsafeRawBufferPointer, from session: Session, now: UInt64) -> Outcome {
        guard session.rtcpAndControlRate.allow(nowNanoseconds: now) else { return .dropped(.rateLimited) }
        guard session.state == .active else { return .dropped(.notActive) }
        guard let packets = try? RTCPCompoundPacket.parse(packet) else { return .dropped(.malformed) }
        guard let terminated = RTCPTermination(packets, from: session.ssrc) else { return .dropped(.foreignSSRC) }
        session.lastHeardNanoseconds = now
        if let time = terminated.senderReportTime { session.media.reception?.recordSenderReport(time, arrivalNanoseconds: now) }
        let blocks = terminated.reportBlocks
        if !blocks.isEmpty, let gauges = session.gauges {
            // The worst stream the member hears is what a person there notices.
            gauges.downstreamLoss.record(blocks.map(\.lossFraction).max() ?? 0)
            gauges.downstreamJitter.record(Double(blocks.map(\.jitter).max() ?? 0) / 48_000)
        }
        // What the member loses of each stream it hears goes to that stream's sender, through
        // the relay's next receiver report to it; only about streams of the member's room.
        for block in blocks where block.ssrc != session.ssrc {
            session.forwarding.listenerLoss(of: block.ssrc, reportedBy: session.id)?
                .record(listener: session.id, fractionLost: block.fractionLost, now: now)
        }
        // One report a member's send interval is what receivers need (RFC 3550 §6.2); more
        // would be copies to every member on the sender's say-so.
        guard let forward = terminated.forward, session.canPublish, now >= session.nextSenderReportForwardNanoseconds,
              let bytes = try? RTCPCompoundPacket.serialized(forward) else {
            return .accepted(nacks: terminated.nacks, forward: nil)
        }
        session.nextSenderReportForwardNanoseconds = now &+ senderReportForwardIntervalNanoseconds
        return .accepted(nacks: terminated.nacks, forward: bytes)
    }

    /// The relay's receiver report (from `relaySSRC`) about the member's stream, so the client
    /// can drive its encoder's FEC and bitrate from the loss it sees; nil before the stream has
    /// a valid sequence. Schedules the next one.
    static func receiverReport(for session: Session, relaySSRC: UInt32, now: UInt64) -> [UInt8]? {
        guard var reception = session.media.reception, reception.isValid else { return nil }
        var block = reception.makeReportBlock(nowNanoseconds: now)
        session.media.reception = reception
        // Each next report comes 0.5–1.5 intervals later (RFC 3550 §6.3.1's randomisation),
        // so members who joined together do not all fall due in the same tick, where building
        // them would hold up forwarding.
        session.nextReceiverReportNanoseconds = now &+ UInt64.random(
            in: receiverReportIntervalNanoseconds / 2...receiverReportIntervalNanoseconds * 3 / 2)
        session.gauges?.upstreamLoss.record(block.lossFraction)
        session.gauges?.upstreamJitter.record(reception.jitterSeconds)
        // The fraction lost is the whole path's: the member's leg to us, or what the median
        // listener reports losing, whichever is worse (``ListenerLossBoard``). The
        // cumulative count stays the leg's.
        block.fractionLost = max(block.fractionLost, session.listenerLoss.medianLoss(listeners: session.forwarding.listenersOfLocalMember, now: now))
        let report = RTCPPacket.receiverReport(RTCPReceiverReport(ssrc: relaySSRC, reportBlocks: [block]))
        return try? RTCPCompoundPacket.serialized([report])
    }
}
