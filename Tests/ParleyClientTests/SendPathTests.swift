import Foundation
import Testing
@testable import ParleyClient
import ParleyAudio
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

    /// The encode step repeats earlier frames exactly as they were sent, only as far back as
    /// the stream has gone on without a gap: after a DTX silence or a frame not sent, the
    /// next packet is plain Opus again, so a receiver can number every copy by its offset.
    @Test func redundancyRepeatsEarlierPacketsExactlyAndNeverAcrossAGap() throws {
        var configuration = OpusEncoder.Configuration()
        configuration.dtx = true
        let encoder = try VoiceEncoder(
            encoder: OpusEncoder(configuration), setting: .init(bitrate: 32_000, expectedLossPercent: 0, redundancy: .init(distances: [1, 3])))
        var frameIndex = 0
        func encode(silent: Bool = false) throws -> (payloadType: UInt8, payload: [UInt8])? {
            defer { frameIndex += 1 }
            let frame = (0..<960).map { silent ? Float(0) : Float(0.3 * sin(Double(frameIndex * 960 + $0) * 2 * .pi * 330 / 48_000)) }
            var payload = [UInt8](repeating: 0, count: VoiceEncoder.maximumPayloadSize)
            let output = try frame.withUnsafeBufferPointer { input in try payload.withUnsafeMutableBytes { try encoder.encode(input, into: $0) } }
            guard case let .payload(payloadType, count) = output else { return nil }
            return (payloadType, Array(payload.prefix(count)))
        }
        var sent: [[UInt8]] = []  // each frame's own Opus packet
        for expected in [0, 1, 1, 2, 2] {
            let packet = try #require(try encode())
            guard expected > 0 else {
                #expect(packet.payloadType == RTPHeader.opusPayloadType, "nothing to repeat yet: plain Opus")
                sent.append(packet.payload)
                continue
            }
            #expect(packet.payloadType == RTPHeader.redPayloadType)
            let red = try OwnedREDPayload(parsing: packet.payload)
            #expect(red.redundant.count == expected)
            for block in red.redundant {
                let back = Int(block.timestampOffset) / 960
                #expect([1, 3].contains(back) && Int(block.timestampOffset) % 960 == 0)
                #expect(block.data == sent[sent.count - back], "a copy is the earlier packet's Opus, byte for byte")
            }
            #expect(red.redundant.map(\.timestampOffset) == red.redundant.map(\.timestampOffset).sorted(by: >), "oldest first")
            sent.append(red.primary.data)
        }
        var silentFrames = 0
        while try encode(silent: true) != nil { silentFrames += 1 }
        #expect(silentFrames < 50, "DTX takes over in silence")
        #expect(try encode()?.payloadType == RTPHeader.opusPayloadType, "after a silence, nothing from before it is repeated")
        #expect(try encode()?.payloadType == RTPHeader.redPayloadType)
        encoder.interrupt()
        #expect(try encode()?.payloadType == RTPHeader.opusPayloadType, "nor across a frame that was not sent")
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
