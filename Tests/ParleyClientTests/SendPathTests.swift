import Testing
@testable import ParleyClient
import ParleyWire

@Suite("The outgoing stream's packets and reports")
struct SendPathTests {
    /// Packs an Opus payload of `payloadSize` bytes as the capture thread does: a DTX frame
    /// (1–2 bytes) is skipped, anything else sent.
    static func packetize(_ packetizer: inout RTPPacketizer, payloadSize: Int, level: UInt8 = 30) throws -> [UInt8]? {
        guard !RTPPacketizer.isSilentDTXFrame(payloadCount: payloadSize) else {
            packetizer.skipSilence(samples: 960)
            return nil
        }
        let payload = [UInt8](repeating: 0xAB, count: payloadSize)
        var buffer = [UInt8](repeating: 0, count: RTPPacketizer.maximumPacketSize)
        let size = try payload.withUnsafeBytes { raw in
            try buffer.withUnsafeMutableBytes {
                try packetizer.packetize(
                    payload: raw, payloadType: RTPHeader.opusPayloadType, samples: 960,
                    level: AudioLevel(voiceActivity: level < 60, level: level), into: $0)
            }
        }
        return Array(buffer.prefix(size))
    }

    /// DTX silence is not sent: the timestamp moves on, the sequence number does not, so a
    /// receiver hears a pause, not a loss; the first packet after it starts a talkspurt.
    @Test func dtxSilenceSkipsTimeButNotSequenceNumbersAndMarksTheNextTalkspurt() throws {
        var packetizer = RTPPacketizer(ssrc: 0xCAFE, initialSequenceNumber: 65_534, initialTimestamp: 4_294_966_000)
        let first = try #require(try Self.packetize(&packetizer, payloadSize: 60))
        let second = try #require(try Self.packetize(&packetizer, payloadSize: 60))
        for _ in 0..<20 { #expect(try Self.packetize(&packetizer, payloadSize: 1) == nil) }
        let resumed = try #require(try Self.packetize(&packetizer, payloadSize: 60))
        let views = try [first, second, resumed].map { bytes in try bytes.withUnsafeBytes { try RTPHeader(RTPPacketView(parsing: $0)) } }
        #expect(views.map(\.sequenceNumber) == [65_534, 65_535, 0], "consecutive across the skip and the wrap")
        #expect(views[1].timestamp &- views[0].timestamp == 960)
        #expect(views[2].timestamp &- views[1].timestamp == 960 * 21, "21 frames of time passed")
        #expect(views.map(\.marker) == [true, false, true])
        #expect(views.allSatisfy { $0.ssrc == 0xCAFE && $0.payloadType == RTPHeader.opusPayloadType })
        let level = try first.withUnsafeBytes { try RTPPacketView(parsing: $0).audioLevel }
        #expect(level == AudioLevel(voiceActivity: true, level: 30), "the RFC 6464 level rides in the one-byte extension")
        #expect(packetizer.packetCount == 3 && packetizer.octetCount == 180 && packetizer.skippedFrames == 20)
    }

    @Test func aFrameNotSentWhileTheLinkIsDownAdvancesTimeAndStartsATalkspurt() throws {
        var packetizer = RTPPacketizer(ssrc: 1, initialSequenceNumber: 10, initialTimestamp: 0)
        _ = try Self.packetize(&packetizer, payloadSize: 40)
        packetizer.skip(samples: 960)
        let next = try #require(try Self.packetize(&packetizer, payloadSize: 40))
        let view = try next.withUnsafeBytes { try RTPHeader(RTPPacketView(parsing: $0)) }
        #expect(view.sequenceNumber == 11 && view.timestamp == 1_920 && view.marker)
    }

    /// A sender report while we send (with the RTP time of this instant), a receiver report
    /// when we have not, both with a CNAME; report intervals spread over 0.5–1.5 s.
    @Test func reportsAreSenderReportsOnlyWhileSendingAndComeAboutOnceASecond() throws {
        var reporter = RTCPReporter(ssrc: 7, cname: "abc", name: "Ada")
        let block = RTCPReportBlock(ssrc: 9, fractionLost: 25, cumulativeLost: 3, extendedHighestSequence: 100, jitter: 48, lastSenderReport: 0, delaySinceLastSenderReport: 0)
        let sender = RTCPReporter.SenderState(packetCount: 50, octetCount: 3_000, timestamp: 96_000, capturedAt: 1_000_000_000)
        let first = try RTCPCompoundPacket.parse(try reporter.compound(sender: sender, blocks: [block], now: 1_010_000_000, unixNanoseconds: 1_700_000_000_000_000_000))
        guard case let .senderReport(report) = first[0] else { Issue.record("expected an SR, got \(first)"); return }
        #expect(report.ssrc == 7 && report.packetCount == 50 && report.reportBlocks == [block])
        #expect(report.rtpTimestamp == 96_000 + 480, "10 ms after the frame was captured")
        guard case let .sourceDescription(sdes) = first[1] else { Issue.record("expected SDES"); return }
        #expect(sdes.chunks.first?.cname == "abc")
        let second = try RTCPCompoundPacket.parse(try reporter.compound(sender: sender, blocks: [], now: 2_000_000_000, unixNanoseconds: 0))
        guard case .receiverReport = second[0] else { Issue.record("nothing sent since: an RR, got \(second)"); return }

        var intervals: [UInt64] = []
        var now: UInt64 = 0
        var last: UInt64?
        while intervals.count < 200 {
            now += 10_000_000
            if reporter.isDue(now: now) {
                if let last { intervals.append(now - last) }
                last = now
            }
        }
        #expect(intervals.allSatisfy { (490_000_000...1_510_000_000).contains($0) })
        let mean = Double(intervals.reduce(0, +)) / Double(intervals.count) / 1e9
        print("RTCP interval: mean \(mean) s over \(intervals.count) reports")
        #expect(abs(mean - 1) < 0.1)
    }
}
