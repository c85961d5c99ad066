import ParleyWire

/// RTCP, terminated per leg (RFC 3550 §7.3's translator that builds its own reports, as
/// mediasoup's router does), the same for a member and a trunk, in plain Swift with time
/// passed in. The leg handler parses nothing itself: it asks this and sends what comes back.
///
/// - A sender report of a stream that arrives over the leg (a member's own, or one of a member
///   behind a trunk) goes on to the stream's listeners rebuilt (``RTCPTermination``): only the
///   stream's own figures and CNAME, at most once per ``senderReportForwardIntervalNanoseconds``.
/// - Report blocks stop here: each is what the leg's listeners lose of a stream they hear, and
///   counts in that stream's ``ListenerLossBoard`` for as many listeners as the leg speaks for
///   (``Leg/reportWeight``: a member for itself, a trunk for every member behind it), so a
///   talker's encoder sees the room's median listener whichever relay the listeners are on.
/// - BYE, NACK, APP and anything naming another leg's stream stop here.
/// - The relay's own receiver report to a leg has a block per stream that arrives over it:
///   the worse of the leg's loss and the median loss of the stream's listeners.
enum LegRTCP {
    /// Sender reports forwarded per stream at most this often (clients send about one a second).
    static let senderReportForwardIntervalNanoseconds: UInt64 = 400_000_000
    /// A member's receiver reports come about this often (a trunk's at its keepalive).
    static let receiverReportIntervalNanoseconds: UInt64 = 1_000_000_000
    /// Blocks in one report (two RTCP receiver reports, about 1,200 bytes): streams beyond
    /// this many over one trunk go unreported, their senders' encoders hearing from the
    /// members of their own relay only.
    static let maximumReportBlocks = 50
    /// The largest report ``writeReceiverReport(for:relaySSRC:now:keepalive:into:)`` writes.
    static let maximumReportSize = RTCPReceiverReportWriter.size(blocks: maximumReportBlocks)

    enum Outcome: Equatable {
        case dropped(DropReason)
        /// `nacks`: generic NACKs the relay does not serve; `forward`: the rebuilt sender
        /// report for the stream's listeners, when one is due.
        case accepted(nacks: Int, forward: [UInt8]?)
    }

    /// A compound RTCP packet from `leg`.
    static func receive(_ packet: UnsafeRawBufferPointer, from leg: Leg, now: UInt64) -> Outcome {
        guard leg.controlRate.allow(nowNanoseconds: now) else { return .dropped(.rateLimited) }
        guard leg.state == .active else { return .dropped(.notActive) }
        guard let packets = try? RTCPCompoundPacket.parse(packet) else { return .dropped(.malformed) }
        // Who sent it: the stream of its sender report, else the reporter of its receiver report.
        var reporter: UInt32?
        var stream: LegStream?
        for case let .senderReport(report) in packets {
            guard let sender = leg.stream(for: report.ssrc) else { return .dropped(.foreignSSRC) }
            (reporter, stream) = (report.ssrc, sender)
        }
        if reporter == nil {
            for case let .receiverReport(report) in packets where reporter == nil { reporter = report.ssrc }
        }
        if let reporter, !leg.reports(as: reporter) { return .dropped(.foreignSSRC) }
        // With neither report (feedback alone, RFC 5506), there is no sender to check.
        guard let terminated = RTCPTermination(packets, from: reporter ?? 0) else { return .dropped(.foreignSSRC) }
        leg.lastHeardNanoseconds = now
        record(terminated.reportBlocks, from: leg, now: now)
        guard let stream else { return .accepted(nacks: terminated.nacks, forward: nil) }
        if let time = terminated.senderReportTime { stream.media.reception?.recordSenderReport(time, arrivalNanoseconds: now) }
        // One report a sender's interval is what listeners need (RFC 3550 §6.2); more would be
        // copies to every listener on the sender's say-so.
        guard let forward = terminated.forward, stream.media.canPublish, now >= stream.nextSenderReportForwardNanoseconds,
              let bytes = try? RTCPCompoundPacket.serialized(forward) else {
            return .accepted(nacks: terminated.nacks, forward: nil)
        }
        stream.nextSenderReportForwardNanoseconds = now &+ senderReportForwardIntervalNanoseconds
        return .accepted(nacks: terminated.nacks, forward: bytes)
    }

    /// What the leg's listeners lose of the streams they hear goes to those streams' boards
    /// (only streams the leg is sent: a trunk hears the members here, not the other trunks).
    private static func record(_ blocks: [RTCPReportBlock], from leg: Leg, now: UInt64) {
        guard !blocks.isEmpty else { return }
        if leg.streamFigures != nil {
            // The worst stream the member hears is what a person there notices.
            leg.streamFigures?.downstreamLoss = blocks.map(\.lossFraction).max() ?? 0
            leg.streamFigures?.downstreamJitterSeconds = Double(blocks.map(\.jitter).max() ?? 0) / 48_000
        }
        let weight = leg.reportWeight
        guard weight > 0 else { return }
        for block in blocks {
            leg.forwarding.listenerLoss(of: block.ssrc, reportedBy: leg.id, includingRemote: leg.forwardsToTrunks)?
                .record(listener: leg.id, fractionLost: block.fractionLost, now: now, weight: weight)
        }
    }

    /// Writes the relay's receiver report (from `relaySSRC`) to `leg` into `output`, a block
    /// per stream with valid statistics, so each sender's encoder can drive its FEC and bitrate
    /// from the loss its listeners see; returns its size, 0 when there is nothing to report
    /// (unless `keepalive`: then an empty report, which keeps a trunk open). Allocates nothing.
    static func writeReceiverReport(for leg: Leg, relaySSRC: UInt32, now: UInt64, keepalive: Bool,
                                    into output: UnsafeMutableRawBufferPointer) -> Int {
        var writer = RTCPReceiverReportWriter(ssrc: relaySSRC, into: output)
        var blocks = 0
        let listeners = leg.forwarding.listeners(ofStreamsOver: leg)
        leg.forEachStream { stream in
            guard blocks < maximumReportBlocks, var reception = stream.media.reception, reception.isValid else { return }
            var block = reception.makeReportBlock(nowNanoseconds: now)
            stream.media.reception = reception
            leg.streamFigures?.upstreamLoss = block.lossFraction
            leg.streamFigures?.upstreamJitterSeconds = reception.jitterSeconds
            // The fraction lost is the whole path's: the leg to us, or what the median
            // listener reports losing, whichever is worse (``ListenerLossBoard``). The
            // cumulative count stays the leg's.
            block.fractionLost = max(block.fractionLost, stream.listenerLoss.medianLoss(listeners: listeners, now: now))
            guard (try? writer.append(block)) != nil else { return }
            blocks += 1
        }
        guard blocks > 0 || keepalive else { return 0 }
        return (try? writer.finish()) ?? 0
    }

    /// When a member's next receiver report is due: 0.5–1.5 intervals from now (RFC 3550
    /// §6.3.1's randomisation), so members who joined together do not all fall due in the same
    /// tick, where building them would hold up forwarding.
    static func nextReceiverReport(after now: UInt64) -> UInt64 {
        now &+ UInt64.random(in: receiverReportIntervalNanoseconds / 2...receiverReportIntervalNanoseconds * 3 / 2)
    }
}

extension RoomSnapshot {
    /// How many members hear the streams that arrive over `leg`: a member's is heard by the
    /// other members here and everyone behind the trunks; a trunk's by the members here.
    func listeners(ofStreamsOver leg: Leg) -> Int {
        leg.forwardsToTrunks ? listenersOfLocalMember : localMemberCount
    }
}
