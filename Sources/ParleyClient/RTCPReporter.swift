import ParleyBasics
import ParleyWire

/// The client's RTCP (RFC 3550 §6): when to report, and what.
///
/// About once a second (the interval drawn from 0.5–1.5 s, §6.3.1, so members that joined
/// together do not report in step), the client sends one compound packet: a sender report
/// when it has sent media since the last one (its NTP ↔ RTP timestamp mapping and counts,
/// which the relay forwards to the others), otherwise a receiver report; either carries a
/// report block for each stream it receives (loss, jitter, LSR/DLSR), and an SDES chunk
/// with its CNAME (§6.1 requires one in every compound packet) and, when given, its NAME.
///
/// Plain Swift, no clock: times are passed in.
public struct RTCPReporter: Sendable {
    /// What the capture thread has sent so far, for the sender report.
    public struct SenderState: Sendable, Equatable {
        public var packetCount: UInt32
        public var octetCount: UInt32
        /// An RTP timestamp and the monotonic time its first sample was captured.
        public var timestamp: UInt32
        public var capturedAt: UInt64

        public init(packetCount: UInt32, octetCount: UInt32, timestamp: UInt32, capturedAt: UInt64) {
            self.packetCount = packetCount
            self.octetCount = octetCount
            self.timestamp = timestamp
            self.capturedAt = capturedAt
        }
    }

    public let ssrc: UInt32
    public let cname: String
    public let name: String?
    public let meanIntervalNanoseconds: UInt64
    private var nextReport: UInt64?
    private var packetsAtLastReport: UInt32?
    private var random = SplitMix64(seed: 0)

    public init(ssrc: UInt32, cname: String, name: String? = nil, meanIntervalNanoseconds: UInt64 = 1_000_000_000) {
        self.ssrc = ssrc
        self.cname = cname
        self.name = name
        self.meanIntervalNanoseconds = meanIntervalNanoseconds
        random = SplitMix64(seed: UInt64(ssrc))
    }

    /// When the next report is due (the first one half an interval after `start`).
    public mutating func nextDeadline(after now: UInt64) -> UInt64 {
        if let nextReport { return nextReport }
        let first = now + meanIntervalNanoseconds / 2
        nextReport = first
        return first
    }

    /// Whether a report is due at `now`; if so, schedules the next one.
    public mutating func isDue(now: UInt64) -> Bool {
        guard now >= nextDeadline(after: now) else { return false }
        // Uniform in [0.5, 1.5] × the mean interval.
        let factor = 0.5 + Double(random.next() >> 11) / Double(1 << 53)
        nextReport = now + UInt64(Double(meanIntervalNanoseconds) * factor)
        return true
    }

    /// The compound packet: SR (or RR) with `blocks` (at most 31 are sent), then SDES.
    /// `unixNanoseconds` is the wall clock for the SR's NTP timestamp, `now` the monotonic
    /// clock `sender.capturedAt` is on.
    public mutating func compound(sender: SenderState?, blocks: [RTCPReportBlock], now: UInt64, unixNanoseconds: UInt64) throws(WireError) -> [UInt8] {
        let blocks = Array(blocks.prefix(31))
        var packets: [RTCPPacket] = []
        if let sender, sender.packetCount != packetsAtLastReport, sender.packetCount > 0 {
            packetsAtLastReport = sender.packetCount
            // The RTP timestamp of this instant, extrapolated from the last captured frame.
            let elapsed = now >= sender.capturedAt ? (now - sender.capturedAt) * 48 / 1_000_000 : 0
            let rtpNow = sender.timestamp &+ UInt32(truncatingIfNeeded: elapsed)
            packets.append(.senderReport(RTCPSenderReport(
                ssrc: ssrc, ntpTimestamp: NTPTimestamp(unixNanoseconds: unixNanoseconds), rtpTimestamp: rtpNow,
                packetCount: sender.packetCount, octetCount: sender.octetCount, reportBlocks: blocks)))
        } else {
            packets.append(.receiverReport(RTCPReceiverReport(ssrc: ssrc, reportBlocks: blocks)))
        }
        var items = [RTCPSourceDescription.Item.cname(cname)]
        if let name, !name.isEmpty {
            items.append(.init(type: RTCPSourceDescription.Item.nameType, value: Array(name.utf8.prefix(255))))
        }
        packets.append(.sourceDescription(RTCPSourceDescription(chunks: [.init(source: ssrc, items: items)])))
        return try RTCPCompoundPacket.serialized(packets)
    }
}
