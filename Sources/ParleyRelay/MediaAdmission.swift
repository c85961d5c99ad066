import ParleyWire

/// Whether one RTP packet that arrived over a leg may be forwarded, as plain Swift with time
/// passed in: the checks a packet must pass, in the order it can fail them, and the reception
/// statistics it updates. It only admits; the leg handler then writes one copy per receiver.
enum MediaAdmission {
    /// What the decision needs to know and keep about one stream; each ``LegStream`` holds one.
    struct Sender: Sendable {
        let ssrc: UInt32
        let canPublish: Bool
        /// Media packets per second.
        var packetRate: TokenBucket
        /// Media bytes per second: the packet rate alone would let a member send full-size
        /// packets at the whole packet rate.
        var byteRate: TokenBucket
        /// RFC 3550 A.1/A.3/A.8 statistics of the sender's stream, from its first packet on.
        var reception: RTPReceptionStatistics?
        /// Media bytes received that passed the checks (forwarded, or dropped for the server-mute).
        var bytesReceived: UInt64 = 0
        /// A moderator muted the sender: its packets count in its statistics, then go no further.
        var isServerMuted = false

        init(ssrc: UInt32, canPublish: Bool, limits: RelayLimits, nowNanoseconds: UInt64) {
            self.ssrc = ssrc
            self.canPublish = canPublish
            packetRate = TokenBucket(ratePerSecond: limits.packetsPerSecondPerMember, burst: limits.packetBurstPerMember,
                                     nowNanoseconds: nowNanoseconds)
            let bytesPerSecond = limits.maximumMemberBitsPerSecond / 8
            byteRate = TokenBucket(ratePerSecond: bytesPerSecond, burst: bytesPerSecond, nowNanoseconds: nowNanoseconds)
        }
    }

    enum Decision: Sendable, Hashable {
        case forward
        case drop(DropReason)
    }

    /// Decides about `packet` (an RTP packet, its header read once where it arrived) from
    /// `sender`; on `.forward` the sender's reception statistics have counted it. `isActive`:
    /// the leg is active (a member has sent `ready`).
    static func admit(_ view: RTPPacketView, from sender: inout Sender, isActive: Bool, nowNanoseconds: UInt64) -> Decision {
        // The rates are spent first: a sender over its rate costs nothing more.
        guard sender.packetRate.allow(nowNanoseconds: nowNanoseconds) else { return .drop(.rateLimited) }
        guard sender.byteRate.allow(cost: view.bytes.count, nowNanoseconds: nowNanoseconds) else { return .drop(.bitrateLimited) }
        guard isActive else { return .drop(.notActive) }
        guard sender.canPublish else { return .drop(.publishNotAllowed) }
        guard view.ssrc == sender.ssrc else { return .drop(.foreignSSRC) }
        if sender.reception == nil {
            sender.reception = RTPReceptionStatistics(ssrc: sender.ssrc, clockRate: 48_000, firstSequence: view.sequenceNumber)
        }
        sender.reception!.record(sequence: view.sequenceNumber, rtpTimestamp: view.timestamp, arrivalNanoseconds: nowNanoseconds)
        sender.bytesReceived &+= UInt64(view.bytes.count)
        // Counted before the mute is applied, so the relay's receiver reports do not tell the
        // muted client its packets are lost (its encoder would add redundancy for nothing).
        guard !sender.isServerMuted else { return .drop(.serverMuted) }
        return .forward
    }
}
