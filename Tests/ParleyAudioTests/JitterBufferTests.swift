import Foundation
import ParleyAudio
import Testing

/// Acceptance 2: the jitter buffer driven by packet traces, judged on the audio it plays.
@Suite("Jitter buffer")
struct JitterBufferTests {
    /// Signal-to-error ratio of `signal` against `reference`, dB.
    static func snr(_ signal: [Float], _ reference: [Float]) -> Double {
        var error = 0.0, power = 0.0
        for (x, y) in zip(signal, reference) {
            power += Double(y) * Double(y)
            error += Double(x - y) * Double(x - y)
        }
        return 10 * log10(power / max(error, 1e-20))
    }

    /// The median over `frames` of each lost frame's signal-to-error ratio (the frame and
    /// the 10 ms after it, where the decoder's state still differs), dB.
    static func medianFrameSNR(_ signal: [Float], _ reference: [Float], start: Int, frames: Set<Int>) -> Double {
        let values = frames.sorted().compactMap { frame -> Double? in
            let begin = start + frame * 960
            let end = min(begin + 1_440, signal.count, reference.count)
            guard begin < end else { return nil }
            return snr(Array(signal[begin..<end]), Array(reference[begin..<end]))
        }.sorted()
        return values.isEmpty ? -.infinity : values[values.count / 2]
    }

    /// Isolated losses (every 7th packet) with the next packet on time: each whose next
    /// packet carries in-band FEC is rebuilt from it (libopus adds FEC only after a frame of
    /// speech), the others concealed (with the default settings: the buffer keeps one frame
    /// of room for FEC while it sees loss); and the rebuilt audio is
    /// closer to the loss-free playback than concealment is (same losses, FEC off): at
    /// least 3 dB higher signal-to-error ratio against each run's own loss-free output.
    /// For the audio comparison every run uses a fixed 60 ms target so they play in step.
    @Test func everyPacketFECCanRecoverIsRecovered() throws {
        let speech = try TestSpeech.farTalker.get()
        let duration = Double(speech.count) / 48_000 + 0.3
        func playback(fec: Bool, losses: Set<Int>, fixedTarget: Bool = true) throws -> ([Float], JitterBufferStatistics) {
            let stream = try EncodedStream(speech, bitrate: 24_000, fec: fec)
            var trace = TraceBuilder(count: stream.packets.count)
            trace.lost = losses
            var configuration = JitterBuffer.Configuration()
            if fixedTarget { configuration.delay.minimumSeconds = 0.060 }
            let buffer = try JitterBuffer(configuration)
            let output = JitterBufferSimulation.output(stream: stream, arrivals: trace.build(), buffer: buffer, duration: duration)
            return (output, buffer.currentStatistics)
        }
        let frames = speech.count / 960
        let losses = Set(stride(from: 10, to: frames - 2, by: 7))
        let (_, statistics) = try playback(fec: true, losses: losses, fixedTarget: false)
        let (cleanFEC, _) = try playback(fec: true, losses: [])
        let (recovered, _) = try playback(fec: true, losses: losses)
        let (cleanPLC, _) = try playback(fec: false, losses: [])
        let (concealed, plcStatistics) = try playback(fec: false, losses: losses)

        // Packet k plays from `start + k·960`, where `start` is where playback began (the
        // first sample the buffer did not fill with silence; every run starts alike).
        let start = cleanFEC.firstIndex { $0 != 0 } ?? 0
        let fecSNR = Self.medianFrameSNR(recovered, cleanFEC, start: start, frames: losses)
        let plcSNR = Self.medianFrameSNR(concealed, cleanPLC, start: start, frames: losses)
        print("\(losses.count) isolated losses: FEC recovered \(statistics.fecRecovered), concealed \(statistics.concealedFrames); median SNR of the lost frames vs loss-free playback: FEC \(fecSNR) dB, PLC \(plcSNR) dB (FEC must be 3 dB better)")
        let carried = try EncodedStream(speech, bitrate: 24_000, fec: true).packets
        let rebuildable = losses.filter { frame in carried[frame + 1].withUnsafeBytes { OpusInBandFEC.isCarried(by: $0) } }.count
        #expect(rebuildable >= losses.count * 3 / 4, "the speech should be speech")
        #expect(statistics.fecRecovered == rebuildable)
        #expect(statistics.concealedFrames == losses.count - rebuildable)
        #expect(statistics.late == 0)
        // Without FEC in the stream there is nothing to rebuild from: every lost frame is concealed.
        #expect(plcStatistics.fecRecovered == 0 && plcStatistics.concealedFrames == losses.count)
        #expect(fecSNR >= plcSNR + 3, "FEC (\(fecSNR) dB) should beat concealment (\(plcSNR) dB) by 3 dB")
    }

    /// A packet overtaken by the next two but arriving before its time is played, not
    /// dropped: every packet is decoded from itself (none concealed or rebuilt), and the
    /// audio matches the in-order run within 25 dB signal-to-difference (the late arrivals
    /// nudge the delay estimate, so playback speed may differ by a step of 50 ppm for a
    /// moment; a single concealed frame of speech would pull this well under 20 dB).
    @Test func lateReorderedPacketIsPlayedNotDropped() throws {
        let speech = try TestSpeech.recorded()
        let stream = try EncodedStream(speech)
        var configuration = JitterBuffer.Configuration()
        configuration.delay.minimumSeconds = 0.080  // a fixed 80 ms target, so both runs time alike
        var inOrder = TraceBuilder(count: stream.packets.count)
        inOrder.delay = { unitNoise($0, seed: 3) * 0.004 }
        var reordered = inOrder
        for index in stride(from: 12, to: stream.packets.count - 3, by: 10) { reordered.extraDelay[index] = 0.045 }
        let reorderedArrivals = reordered.build()
        let overtaken = zip(reorderedArrivals, reorderedArrivals.dropFirst()).filter { $0.0.index > $0.1.index }.count
        let duration = Double(speech.count) / 48_000 + 0.3

        let reference = JitterBufferSimulation.output(
            stream: stream, arrivals: inOrder.build(), buffer: try JitterBuffer(configuration), duration: duration)
        let buffer = try JitterBuffer(configuration)
        let output = JitterBufferSimulation.output(stream: stream, arrivals: reorderedArrivals, buffer: buffer, duration: duration)
        let statistics = buffer.currentStatistics
        print("\(reordered.extraDelay.count) packets delayed 45 ms (\(overtaken) arrivals out of order): late \(statistics.late), concealed \(statistics.concealedFrames), FEC \(statistics.fecRecovered), decoded \(statistics.decodedFrames)/\(stream.packets.count)")
        #expect(overtaken >= reordered.extraDelay.count)
        #expect(statistics.late == 0)
        #expect(statistics.concealedFrames == 0 && statistics.fecRecovered == 0)
        #expect(statistics.decodedFrames == stream.packets.count)
        let difference = Self.snr(output, reference)
        print("reordered playback vs in-order playback: \(difference) dB signal-to-difference (threshold 25 dB)")
        #expect(difference >= 25, "reordered packets should play as in order")
    }

    /// A packet that arrives after its time has been concealed is counted late and
    /// dropped; playback is not disturbed by it.
    @Test func packetArrivingAfterItsTimeIsCountedLateAndDropped() throws {
        let speech = try TestSpeech.recorded()
        let stream = try EncodedStream(speech)
        var trace = TraceBuilder(count: stream.packets.count)
        trace.extraDelay = [30: 0.5]
        let buffer = try JitterBuffer()
        _ = JitterBufferSimulation.output(stream: stream, arrivals: trace.build(), buffer: buffer, duration: Double(speech.count) / 48_000 + 0.3)
        let statistics = buffer.currentStatistics
        print("one packet 500 ms late: late \(statistics.late), FEC \(statistics.fecRecovered), concealed \(statistics.concealedFrames)")
        #expect(statistics.late == 1)
        #expect(statistics.duplicates == 0)
        // Rebuilt from the next packet's FEC if that one carries any, else concealed.
        let fec = stream.packets[31].withUnsafeBytes { OpusInBandFEC.isCarried(by: $0) }
        #expect(statistics.fecRecovered == (fec ? 1 : 0) && statistics.fecRecovered + statistics.concealedFrames == 1)
    }

    /// Every packet sent twice: the copies are counted and ignored, the audio is unchanged.
    @Test func duplicatesAreIgnored() throws {
        let speech = try TestSpeech.recorded()
        let stream = try EncodedStream(speech)
        let single = TraceBuilder(count: stream.packets.count)
        var doubled = single
        doubled.duplicated = Set(0..<stream.packets.count)
        let duration = Double(speech.count) / 48_000 + 0.3
        let reference = JitterBufferSimulation.output(stream: stream, arrivals: single.build(), buffer: try JitterBuffer(), duration: duration)
        let buffer = try JitterBuffer()
        let output = JitterBufferSimulation.output(stream: stream, arrivals: doubled.build(), buffer: buffer, duration: duration)
        print("duplicates counted: \(buffer.currentStatistics.duplicates) of \(stream.packets.count)")
        #expect(buffer.currentStatistics.duplicates == stream.packets.count)
        let identical = output == reference
        #expect(identical, "duplicates changed the audio")
    }

    /// Redundant copies (RED) of every packet's two predecessors, arriving with it: they
    /// fill nothing when nothing is lost, so the audio, the target delay and the counters are
    /// those of the stream without them; a copy of a packet that arrives after the packet
    /// itself is dropped quietly, not counted duplicate or late.
    @Test func copiesOfFramesThatArrivedChangeNothing() throws {
        let speech = try TestSpeech.recorded()
        let stream = try EncodedStream(speech)
        let arrivals = TraceBuilder(count: stream.packets.count, delay: { ($0 * 7) % 5 == 0 ? 0.012 : 0 }).build()
        let duration = Double(speech.count) / 48_000 + 0.3
        let plain = try JitterBuffer()
        let reference = JitterBufferSimulation.output(stream: stream, arrivals: arrivals, buffer: plain, duration: duration)
        let withCopies = try JitterBuffer()
        var output: [Float] = []
        var next = 0
        var chunk = [Float](repeating: 0, count: JitterBufferSimulation.chunk)
        for read in 0..<Int(duration / 0.010) {
            let now = Double(read) * 0.010
            while next < arrivals.count, arrivals[next].time <= now {
                let index = arrivals[next].index
                func insert(_ frame: Int, redundant: Bool) {
                    withCopies.insert(
                        payload: stream.packets[frame], sequenceNumber: UInt16(truncatingIfNeeded: frame &+ 40_000),
                        timestamp: UInt32(truncatingIfNeeded: frame &* 960 &+ 4_000_000_000), arrival: arrivals[next].time, isRedundant: redundant)
                }
                insert(index, redundant: false)
                for back in [1, 2] where index - back >= 0 { insert(index - back, redundant: true) }
                next += 1
            }
            chunk.withUnsafeMutableBufferPointer { _ = withCopies.read(into: $0, now: now) }
            output += chunk
        }
        let statistics = withCopies.currentStatistics
        #expect(output == reference, "copies of frames that arrived changed the audio")
        #expect(statistics.targetDelayMilliseconds == plain.currentStatistics.targetDelayMilliseconds, "copies fed the delay statistics")
        #expect(statistics.duplicates == 0 && statistics.late == 0 && statistics.redundancyRecovered == 0)
        #expect(statistics.received == stream.packets.count)
    }

    /// The target follows a jitter step up within 2 s and back down within 10 s.
    ///
    /// 0–20 s: jitter uniform in 0–5 ms. 20–40 s: uniform in 0–100 ms (its 97th percentile,
    /// the buffer's quantile, is 97 ms). 40–60 s: 0–5 ms again. "Followed up": the target
    /// reaches 80 % of the new 97th percentile. "Followed down": it comes back within 10 ms of where it was before
    /// the step.
    @Test func targetDelayFollowsAJitterStepUpWithinTwoSecondsAndDownWithinTen() throws {
        let tone = (0..<(60 * 48_000)).map { Float(0.2 * sin(2 * Double.pi * 400 * Double($0) / 48_000)) }
        let stream = try EncodedStream(tone, bitrate: 24_000, fec: false, complexity: 0)
        var trace = TraceBuilder(count: stream.packets.count)
        trace.delay = { index in
            let time = Double(index) * 0.02
            let spread = time >= 20 && time < 40 ? 0.100 : 0.005
            return unitNoise(index, seed: 7) * spread
        }
        let buffer = try JitterBuffer()
        var targets = [(time: Double, target: Double)]()
        JitterBufferSimulation.run(stream: stream, arrivals: trace.build(), buffer: buffer, duration: 60) { _, now, statistics in
            targets.append((now, statistics.targetDelayMilliseconds))
        }
        let before = targets.filter { $0.time >= 15 && $0.time < 20 }.map(\.target).max()!
        let up = targets.first { $0.time >= 20 && $0.target >= 0.8 * 97 }?.time ?? .infinity
        let down = targets.first { $0.time >= 40 && $0.target <= before + 10 }?.time ?? .infinity
        let high = targets.filter { $0.time >= 35 && $0.time < 40 }.map(\.target).max()!
        print("target before the step \(before) ms, during \(high) ms; up after \(up - 20) s (limit 2 s), down after \(down - 40) s (limit 10 s); late \(buffer.currentStatistics.late)")
        #expect(up - 20 <= 2)
        #expect(down - 40 <= 10)
        #expect(high <= 400)
    }

    /// DTX is told apart from loss by sequence numbers. The sender (DTX on) skips the tiny
    /// packets libopus marks as silence, as RFC 7587 allows: its sequence numbers stay
    /// consecutive while timestamps jump. The buffer fills those gaps with comfort noise and
    /// counts no loss. The same gaps with sequence numbers that jump too are loss.
    @Test(arguments: [true, false])
    func dtxGapsAreComfortNoiseWhileSequenceGapsAreLoss(consecutiveSequenceNumbers: Bool) throws {
        let speech = try TestSpeech.recorded()
        // Speech, 1 s of silence, speech again.
        let signal = speech + [Float](repeating: 0, count: 48_000) + speech
        var configuration = OpusEncoder.Configuration()
        configuration.dtx = true
        let encoder = try OpusEncoder(configuration)
        var sent: [(payload: [UInt8], frame: Int)] = []
        for frame in 0..<(signal.count / 960) {
            let packet = try encoder.encode(Array(signal[frame * 960..<(frame + 1) * 960]))
            if packet.count > 2 { sent.append((packet, frame)) }
        }
        let skipped = signal.count / 960 - sent.count
        let buffer = try JitterBuffer()
        var chunk = [Float](repeating: 0, count: 480)
        var next = 0
        // Read until the last packet has played (after it the stream simply ends, and the
        // buffer running dry there is not what this test is about).
        var read = 0
        while buffer.currentStatistics.decodedFrames < sent.count, read < 2_000 {
            let now = Double(read) * 0.01
            while next < sent.count, Double(sent[next].frame) * 0.02 + 0.03 <= now {
                let sequence = consecutiveSequenceNumbers ? next : sent[next].frame
                buffer.insert(
                    payload: sent[next].payload, sequenceNumber: UInt16(sequence), timestamp: UInt32(sent[next].frame * 960),
                    arrival: Double(sent[next].frame) * 0.02 + 0.03)
                next += 1
            }
            chunk.withUnsafeMutableBufferPointer { _ = buffer.read(into: $0, now: now) }
            read += 1
        }
        let statistics = buffer.currentStatistics
        print("\(consecutiveSequenceNumbers ? "DTX" : "loss"): \(skipped) frames not sent; comfort noise \(statistics.comfortNoiseSamples / 48) ms, concealed frames \(statistics.concealedFrames), underrun \(statistics.underrunSamples / 48) ms")
        #expect(skipped >= 30, "the encoder should have gone into DTX in the silence")
        if consecutiveSequenceNumbers {
            #expect(statistics.concealedFrames == 0)
            #expect(statistics.underrunSamples == 0)
            #expect(statistics.comfortNoiseSamples > 0)
        } else {
            #expect(statistics.concealedFrames + statistics.underrunSamples / 960 > 0)
            #expect(statistics.comfortNoiseSamples == 0)
        }
    }
}
