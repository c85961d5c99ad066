import ParleyWire

/// RTCP on a trunk, terminated at each end as for members (``MemberRTCP``), in plain Swift
/// with time passed in.
///
/// - A sender report of a stream behind the trunk goes on to the members here rebuilt
///   (``RTCPTermination``), at most one per stream per forwarding interval; it never goes on
///   to another trunk (each relay of the room has its own trunk to the sender's relay).
/// - The peer relay's receiver report stops here: each block is what the peer's members lose
///   of a stream of a member here, and it counts in that member's ``ListenerLossBoard`` once
///   for every member behind the trunk, so the talker's encoder sees the room's median
///   listener whichever relay the listeners are on.
/// - This end's receiver report to the peer has a block per stream it receives over the
///   trunk: the worse of the trunk leg's loss and the median loss of the members here.
enum TrunkRTCP {
    enum Outcome: Equatable {
        case dropped(DropReason)
        /// `forward`: a rebuilt sender report for the members here, when one is due.
        case accepted(forward: [UInt8]?)
    }

    static func receive(_ packet: UnsafeRawBufferPointer, from trunk: Trunk, now: UInt64) -> Outcome {
        guard trunk.rtcpAndControlRate.allow(nowNanoseconds: now) else { return .dropped(.rateLimited) }
        guard let packets = try? RTCPCompoundPacket.parse(packet) else { return .dropped(.malformed) }
        var sender: UInt32?
        for case let .senderReport(report) in packets { sender = report.ssrc }
        guard let sender else {
            for case let .receiverReport(report) in packets { recordPeerReport(report.reportBlocks, from: trunk, now: now) }
            return .accepted(forward: nil)
        }
        guard let stream = trunk.streams[sender], let terminated = RTCPTermination(packets, from: sender) else {
            return .dropped(.foreignSSRC)
        }
        if let time = terminated.senderReportTime { stream.media.reception?.recordSenderReport(time, arrivalNanoseconds: now) }
        guard let forward = terminated.forward, now >= stream.nextSenderReportForwardNanoseconds,
              let bytes = try? RTCPCompoundPacket.serialized(forward) else {
            return .accepted(forward: nil)
        }
        stream.nextSenderReportForwardNanoseconds = now &+ MemberRTCP.senderReportForwardIntervalNanoseconds
        return .accepted(forward: bytes)
    }

    /// What the members behind the trunk lose of the streams of members here.
    private static func recordPeerReport(_ blocks: [RTCPReportBlock], from trunk: Trunk, now: UInt64) {
        guard trunk.remoteMemberCount > 0 else { return }
        let receivers = trunk.forwarding.receivers
        for block in blocks {
            receivers.first { !$0.isTrunk && $0.ssrc == block.ssrc }?
                .listenerLoss.record(listener: trunk.id, fractionLost: block.fractionLost, now: now, weight: trunk.remoteMemberCount)
        }
    }

    /// Blocks in one report (two RTCP receiver reports, about 1,200 bytes): streams beyond
    /// this many in one room go unreported, their senders' encoders hearing from the members
    /// of their own relay only.
    static let maximumReportBlocks = 50

    /// This end's receiver report to the peer (from `relaySSRC`), one block per stream with
    /// statistics; with no stream, an empty report, which keeps the trunk alive all the same.
    static func receiverReport(for trunk: Trunk, relaySSRC: UInt32, now: UInt64) -> [UInt8]? {
        var blocks: [RTCPReportBlock] = []
        for stream in trunk.streams.values where blocks.count < maximumReportBlocks {
            guard var reception = stream.media.reception, reception.isValid else { continue }
            var block = reception.makeReportBlock(nowNanoseconds: now)
            stream.media.reception = reception
            let listeners = stream.listenerLoss.medianLoss(listeners: trunk.forwarding.localMemberCount, now: now)
            block.fractionLost = max(block.fractionLost, listeners)
            blocks.append(block)
        }
        var reports: [RTCPPacket] = []
        var start = 0
        repeat {
            let end = min(start + 31, blocks.count)
            reports.append(.receiverReport(RTCPReceiverReport(ssrc: relaySSRC, reportBlocks: Array(blocks[start..<end]))))
            start = end
        } while start < blocks.count
        return try? RTCPCompoundPacket.serialized(reports)
    }
}
