import ParleyWire

/// What the relay makes of one member's compound RTCP packet: the relay terminates RTCP per
/// leg (RFC 3550 §7.3's translator that builds its own reports, as mediasoup's router does),
/// so nothing a member sends reaches the others as it was sent.
///
/// - The member's sender report goes on with nothing but its own stream's figures (NTP ↔ RTP
///   timestamp mapping, packet and octet counts) and its own CNAME, in a packet built here.
/// - Report blocks (what the member hears of the others) stop here: they feed the member's
///   downstream gauges. What a member hears of its own stream it learns from the relay's
///   receiver reports, so no member can tell another's encoder what loss to expect.
/// - BYE, NACK, APP and anything naming another member's SSRC stop here.
///
/// Plain values in, plain values out: ``RelayWorker`` parses, asks this, and sends.
struct RTCPTermination: Sendable, Equatable {
    /// The sender report to forward (rebuilt), if the packet held one from the member.
    var forward: [RTCPPacket]?
    /// The NTP time of the member's sender report, for the relay's own report's LSR/DLSR.
    var senderReportTime: NTPTimestamp?
    /// Every report block the member sent, about the streams it receives.
    var reportBlocks: [RTCPReportBlock] = []
    /// Generic NACKs, which the relay does not serve (it keeps no retransmission buffer).
    var nacks = 0

    /// Nil when a sender or receiver report claims an SSRC other than the member's: the
    /// whole packet is refused.
    init?(_ packets: [RTCPPacket], from ssrc: UInt32) {
        var senderReport: RTCPSenderReport?
        var cname: [UInt8]?
        for packet in packets {
            switch packet {
            case let .senderReport(report):
                guard report.ssrc == ssrc else { return nil }
                senderReport = report
                reportBlocks += report.reportBlocks
            case let .receiverReport(report):
                guard report.ssrc == ssrc else { return nil }
                reportBlocks += report.reportBlocks
            case let .sourceDescription(description):
                let own = description.chunks.first { $0.source == ssrc }
                cname = own?.items.first { $0.type == RTCPSourceDescription.Item.cnameType }?.value ?? cname
            case .genericNACK:
                nacks += 1
            case .goodbye, .other:
                break
            }
        }
        guard let senderReport else { return }
        senderReportTime = senderReport.ntpTimestamp
        var forward: [RTCPPacket] = [.senderReport(RTCPSenderReport(
            ssrc: ssrc, ntpTimestamp: senderReport.ntpTimestamp, rtpTimestamp: senderReport.rtpTimestamp,
            packetCount: senderReport.packetCount, octetCount: senderReport.octetCount))]
        if let cname {
            let item = RTCPSourceDescription.Item(type: RTCPSourceDescription.Item.cnameType, value: Array(cname.prefix(Self.maximumCNAMELength)))
            forward.append(.sourceDescription(RTCPSourceDescription(chunks: [.init(source: ssrc, items: [item])])))
        }
        self.forward = forward
    }

    /// CNAMEs are cut to this many bytes: a client's is 16 hex digits.
    static let maximumCNAMELength = 64
}
