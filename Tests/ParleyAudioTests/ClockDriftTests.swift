import Foundation
import ParleyAudio
import Testing

/// Acceptance 2, drift: a sender whose clock runs 500 ppm fast or slow, for 10 minutes of
/// simulated time, with 0–10 ms of jitter. The buffer must absorb it by playing slightly
/// faster or slower, never by dropping or repeating audio.
///
/// Signal: a 437 Hz tone at −12 dBFS through Opus at 64 kb/s. 437 Hz is chosen so every
/// skip or repeat a jitter buffer could make (a 20 ms frame, a 10 ms chunk, a 2.5 ms
/// concealment step) shifts its phase by a visible amount (0.74, 0.37 and 0.09 of a cycle).
/// Detector: a pure tone satisfies x[n] = 2·cos(ω)·x[n−1] − x[n−2], so the residual
/// e[n] = x[n] − 2·cos(ω)·x[n−1] + x[n−2] is ~0 on a continuous tone (the slow speed
/// changes of time-stretching move ω by under 3 %, far too little to matter) and jumps on
/// any discontinuity.
@Suite("Clock drift")
struct ClockDriftTests {
    static let frequency = 437.0
    static let amplitude: Float = 0.25
    /// Largest residual allowed, relative to the amplitude. The codec's own noise reaches
    /// about 0.002; a skip or a repeat reaches 0.5–0.7
    /// (`skipsAndRepeatsExceedTheDiscontinuityBound`). 0.02 sits ten times above the first
    /// and twenty-five times below the second. (It caught a real defect: SpeexDSP reduced
    /// a speed of exactly 1 to the fraction 1/1 and truncated its read position, a
    /// one-sample jump of 0.05; see `JitterBuffer.ratioNumerator`.)
    static let bound: Float = 0.02

    static let tone: EncodedStream? = {
        let count = 601 * 48_000
        let step = 2 * Double.pi * frequency / 48_000
        var signal = [Float](repeating: 0, count: count)
        for index in 0..<count { signal[index] = amplitude * Float(sin(step * Double(index))) }
        return try? EncodedStream(signal, bitrate: 64_000, fec: false, complexity: 0)
    }()

    /// The largest |e[n]| over `signal`, relative to the amplitude.
    struct DiscontinuityDetector {
        let coefficient = Float(2 * cos(2 * Double.pi * ClockDriftTests.frequency / 48_000))
        var previous: Float = 0
        var beforePrevious: Float = 0
        var maximum: Float = 0
        var at = 0
        var count = 0

        mutating func feed(_ samples: UnsafeBufferPointer<Float>) {
            for sample in samples {
                let residual = abs(sample - coefficient * previous + beforePrevious)
                if count >= 2 && residual > maximum {
                    maximum = residual
                    at = count
                }
                beforePrevious = previous
                previous = sample
                count += 1
            }
        }

        var relative: Float { maximum / ClockDriftTests.amplitude }
    }

    @Test(arguments: [500.0, -500.0])
    func driftOf500PPMForTenMinutesIsAbsorbedWithoutSkipsOrRepeats(ppm: Double) throws {
        let stream = try #require(Self.tone, "could not encode the test tone")
        var trace = TraceBuilder(count: stream.packets.count)
        trace.driftPPM = ppm
        trace.delay = { unitNoise($0, seed: 11) * 0.010 }
        let buffer = try JitterBuffer()
        var detector = DiscontinuityDetector()
        var lowest = Double.infinity, highest = -Double.infinity
        var rateSum = 0.0, rateCount = 0
        var started: JitterBufferStatistics?
        JitterBufferSimulation.run(stream: stream, arrivals: trace.build(), buffer: buffer, duration: 600) { chunk, now, statistics in
            // The first 10 s settle the delay from its 70 ms start to the measured target.
            guard now >= 10 else { return }
            if started == nil { started = statistics }
            detector.feed(chunk)
            lowest = min(lowest, statistics.currentDelayMilliseconds)
            highest = max(highest, statistics.currentDelayMilliseconds)
            rateSum += statistics.playbackRate
            rateCount += 1
        }
        let end = buffer.currentStatistics
        let settled = try #require(started)
        let meanRate = rateSum / Double(rateCount)
        print("""
            drift \(ppm) ppm over 600 s: current delay \(lowest)–\(highest) ms (target \(end.targetDelayMilliseconds) ms), \
            mean playback rate \(meanRate) (sender/receiver ratio \(1 + ppm * 1e-6)), \
            largest discontinuity \(detector.relative) of the amplitude at sample \(detector.at) (bound \(Self.bound)), \
            concealed \(end.concealedFrames - settled.concealedFrames), underrun samples \(end.underrunSamples - settled.underrunSamples), late \(end.late)
            """)
        #expect(highest - lowest <= 40, "the delay wandered over \(highest - lowest) ms")
        #expect(highest <= 120 && lowest >= 5, "the delay left 5–120 ms: \(lowest)–\(highest) ms")
        #expect(abs(meanRate - (1 + ppm * 1e-6)) <= 100e-6, "playback should run at the sender's rate on average")
        #expect(end.concealedFrames == settled.concealedFrames, "frames were concealed: audio was skipped")
        #expect(end.underrunSamples == settled.underrunSamples, "the buffer ran dry: audio was repeated or stretched by concealment")
        #expect(detector.relative < Self.bound, "a discontinuity of \(detector.relative) of the amplitude: a skip or repeat")
    }

    /// The detector sees what it must: the tone decoded straight through Opus stays under
    /// the bound, and the same audio with 10 ms cut out, or 2.5 ms played twice, exceeds it.
    @Test func skipsAndRepeatsExceedTheDiscontinuityBound() throws {
        let stream = try #require(Self.tone)
        let decoder = try OpusDecoder()
        var decoded = [Float](repeating: 0, count: 200 * 960)
        for index in 0..<200 {
            _ = try stream.packets[index].withUnsafeBytes { packet in
                try decoded.withUnsafeMutableBufferPointer { try decoder.decode(packet, into: UnsafeMutableBufferPointer(rebasing: $0[index * 960..<(index + 1) * 960])) }
            }
        }
        let clean = Array(decoded[9_600...])
        func peak(_ signal: [Float]) -> Float {
            var detector = DiscontinuityDetector()
            signal.withUnsafeBufferPointer { detector.feed($0) }
            return detector.relative
        }
        let skipped = Array(clean[..<48_000]) + Array(clean[48_480...])
        let repeated = Array(clean[..<48_000]) + Array(clean[47_880..<48_000]) + Array(clean[48_000...])
        print("discontinuity: clean \(peak(clean)), 10 ms skipped \(peak(skipped)), 2.5 ms repeated \(peak(repeated)) (bound \(Self.bound))")
        #expect(peak(clean) < Self.bound)
        #expect(peak(skipped) > Self.bound)
        #expect(peak(repeated) > Self.bound)
    }
}
