import Foundation
@testable import ParleyAudio
import Testing

/// Time-stretching as a listener hears it: the voice keeps its pitch when the playout
/// shortens or lengthens it, splices do not click, and pauses shrink before speech does.
@Suite("Time stretching")
struct TimeStretcherTests {
    /// Plays `signal` through a `PlayoutAudioBuffer` as the jitter buffer does (20 ms frames
    /// in, 10 ms periods out, 2.5 ms kept back), calling `operate` after each frame is
    /// appended; returns what was played.
    static func play(_ signal: [Float], operate: (inout TimeStretcher, inout PlayoutAudioBuffer) -> Void) -> [Float] {
        playShortening(signal) { stretcher, buffer in
            operate(&stretcher, &buffer)
            return .notPossible
        }.output
    }

    /// The same, for operations that shorten the audio at the read position: also returns
    /// where each cut lies in the output and how much it removed, so output and input can
    /// be compared at the same place.
    static func playShortening(
        _ signal: [Float], shorten: (inout TimeStretcher, inout PlayoutAudioBuffer) -> TimeStretcher.Outcome
    ) -> (output: [Float], cuts: [(at: Int, removed: Int)]) {
        var cuts: [(at: Int, removed: Int)] = []
        var buffer = PlayoutAudioBuffer(channels: 1, history: 1_920, capacity: 8_192)
        var stretcher = TimeStretcher()
        var output = [Float]()
        var period = [Float](repeating: 0, count: 480)
        var position = 0
        while position + 960 <= signal.count || buffer.pending >= 480 {
            while buffer.pending < 600, position + 960 <= signal.count {
                _ = buffer.append(upTo: 960) { target in
                    for index in 0..<960 { target[index] = signal[position + index] }
                    return 960
                }
                position += 960
                let removed = shorten(&stretcher, &buffer).samples
                if removed > 0 { cuts.append((output.count, removed)) }
            }
            guard buffer.pending >= 480 else { break }
            period.withUnsafeMutableBufferPointer { buffer.read(into: $0) }
            output += period
        }
        return (output, cuts)
    }

    /// A voiced sound: ten harmonics of `f0` falling at 6 dB an octave, at about −20 dBFS.
    static func vowel(f0: Double, seconds: Double) -> [Float] {
        (0..<Int(seconds * 48_000)).map { index in
            let time = Double(index) / 48_000
            var value = 0.0
            for harmonic in 1...10 { value += sin(2 * .pi * f0 * Double(harmonic) * time + Double(harmonic)) / Double(harmonic) }
            return Float(0.05 * value)
        }
    }

    /// The fundamental of `signal[start..<start + 1,200]`: the autocorrelation peak between
    /// 2.5 and 15 ms, refined by a parabola; nil when the frame is not clearly periodic.
    static func fundamental(_ signal: [Float], at start: Int) -> Double? {
        let length = 480
        guard start + length + 722 <= signal.count else { return nil }
        var scores = [Double](repeating: 0, count: 722)
        signal.withUnsafeBufferPointer { samples in
            for lag in 119...721 {
                var cross: Float = 0, first: Float = 0, second: Float = 0
                for index in start..<start + length {
                    let x = samples[index], y = samples[index + lag]
                    cross += x * y
                    first += x * x
                    second += y * y
                }
                scores[lag] = first * second > 0 ? Double(cross / (first * second).squareRoot()) : 0
            }
        }
        // The first lag that comes within 5 % of the best is the period; its multiples
        // correlate as well on a steady vowel.
        guard let highest = (120...720).map({ scores[$0] }).max(), highest > 0.8,
              let best = (120...720).first(where: { scores[$0] >= 0.95 * highest && scores[$0] >= scores[$0 - 1] && scores[$0] >= scores[$0 + 1] })
        else { return nil }
        let (left, middle, right) = (scores[best - 1], scores[best], scores[best + 1])
        let shift = 0.5 * (left - right) / (left - 2 * middle + right)
        return 48_000 / (Double(best) + (shift.isFinite ? shift : 0))
    }

    /// The median fundamental over a signal's periodic frames.
    static func medianFundamental(_ signal: [Float]) -> Double? {
        let values = stride(from: 0, to: signal.count - 1_300, by: 1_920).compactMap { fundamental(signal, at: $0) }.sorted()
        return values.isEmpty ? nil : values[values.count / 2]
    }

    @Test func acceleratingAVowelShortensItWithoutChangingItsPitch() throws {
        let input = Self.vowel(f0: 140, seconds: 2)
        var removed = 0
        let output = Self.play(input) { stretcher, buffer in
            removed += stretcher.accelerate(&buffer, maximum: 960, pace: .voiced).samples
        }
        let (measuredBefore, measuredAfter) = (Self.medianFundamental(input), Self.medianFundamental(output))
        let before = try #require(measuredBefore)
        let after = try #require(measuredAfter)
        // The same shortening by resampling would raise the pitch by the speed-up.
        let speedUp = Double(input.count) / Double(output.count)
        print("vowel 140 Hz: \(input.count) samples played as \(output.count) (\(removed) removed, speed ×\(speedUp)); fundamental \(before) Hz before, \(after) Hz after (resampling would give \(before * speedUp) Hz)")
        #expect(speedUp > 1.15, "accelerate should have removed a period from most frames")
        #expect(abs(after / before - 1) < 0.01)
    }

    @Test func expandingAVowelLengthensItWithoutChangingItsPitch() throws {
        let input = Self.vowel(f0: 210, seconds: 2)
        let output = Self.play(input) { stretcher, buffer in
            _ = stretcher.expand(&buffer, quietMaximum: 0)
        }
        let (measuredBefore, measuredAfter) = (Self.medianFundamental(input), Self.medianFundamental(output))
        let before = try #require(measuredBefore)
        let after = try #require(measuredAfter)
        let slowDown = Double(output.count) / Double(input.count)
        print("vowel 210 Hz: lengthened ×\(slowDown); fundamental \(before) Hz before, \(after) Hz after")
        #expect(slowDown > 1.05)
        #expect(abs(after / before - 1) < 0.01)
    }

    /// Recorded speech, shortened by a fifth the way a spike's backlog is: wherever a cut
    /// lies, the pitch across it is the pitch of the same speech before it was shortened
    /// (within 1 % at the median, 3 % for nine cuts in ten), where resampling to the same
    /// length would raise it by a quarter.
    @Test func acceleratedSpeechKeepsItsPitchAcrossEveryCut() throws {
        let speech = try TestSpeech.farTalker.get()
        var removed = 0
        let target = speech.count / 5
        let (output, cuts) = Self.playShortening(speech) { stretcher, buffer in
            guard removed < target else { return .notPossible }
            let outcome = stretcher.accelerate(&buffer, maximum: target - removed, pace: .fast)
            removed += outcome.samples
            return outcome
        }
        // Each voiced cut: the window from just before it, against the input where the same
        // speech was (the cut's position plus everything removed before it).
        var ratios = [Double]()
        var removedBefore = 0
        for cut in cuts {
            defer { removedBefore += cut.removed }
            let start = cut.at - 240
            guard start >= 0, let after = Self.fundamental(output, at: start),
                  let before = Self.fundamental(speech, at: start + removedBefore) else { continue }
            ratios.append(after / before)
        }
        ratios.sort()
        let deviations = ratios.map { abs($0 - 1) }.sorted()
        let median = ratios[ratios.count / 2]
        let ninth = deviations[deviations.count * 9 / 10]
        let speedUp = Double(speech.count) / Double(output.count)
        print("speech shortened ×\(speedUp) by \(cuts.count) cuts; pitch across \(ratios.count) voiced cuts vs the same place unshortened: median ratio \(median), 90 % within \(ninth * 100) % (resampling would give \(speedUp))")
        #expect(speedUp > 1.2)
        #expect(ratios.count >= 50)
        #expect(abs(median - 1) < 0.01)
        #expect(ninth < 0.03)
    }

    /// Splices on a pure tone (437 Hz: a period of 109.8 samples, so no whole number of
    /// samples repeats it exactly) leave no step: the residual of the tone's recurrence stays
    /// under the bound the clock-drift test uses for skips and repeats.
    @Test func splicesDoNotClick() {
        let tone = (0..<96_000).map { Float(0.25 * sin(2 * Double.pi * ClockDriftTests.frequency * Double($0) / 48_000)) }
        var operations = 0, done = 0
        let output = Self.play(tone) { stretcher, buffer in
            operations += 1
            let outcome = operations % 2 == 0
                ? stretcher.accelerate(&buffer, maximum: 720, pace: .fast)
                : stretcher.expand(&buffer, quietMaximum: 0)
            if outcome != .notPossible { done += 1 }
        }
        var detector = ClockDriftTests.DiscontinuityDetector()
        output.withUnsafeBufferPointer { detector.feed($0) }
        print("\(done) splices in \(operations) tries on a 437 Hz tone: largest discontinuity \(detector.relative) of the amplitude (bound \(ClockDriftTests.bound))")
        #expect(done >= operations * 9 / 10)
        #expect(detector.relative < ClockDriftTests.bound)
    }

    /// Speech, a half-second pause, speech: shortening by 300 ms takes it from the pause;
    /// both phrases come through whole.
    @Test func pausesAreCutBeforeSpeech() throws {
        let phrase = try TestSpeech.recorded("Front_Center")
        let pause = 24_000
        let input = phrase + [Float](repeating: 0, count: pause) + phrase
        var removed = 0
        let output = Self.play(input) { stretcher, buffer in
            guard removed < 14_400 else { return }
            removed += stretcher.accelerate(&buffer, maximum: 14_400 - removed, pace: .quietOnly).samples
        }
        func energy(_ signal: ArraySlice<Float>) -> Double { signal.reduce(0) { $0 + Double($1) * Double($1) } }
        let phraseEnergy = energy(phrase[...])
        // The second phrase arrives `removed` samples early; its energy is all there.
        let secondStart = phrase.count + pause - removed
        let first = energy(output[0..<phrase.count])
        let second = energy(output[secondStart..<min(output.count, secondStart + phrase.count)])
        print("pause of 500 ms: \(removed / 48) ms cut; phrase energy kept \(first / phraseEnergy), \(second / phraseEnergy)")
        #expect(removed == 14_400)
        #expect(abs(first / phraseEnergy - 1) < 0.05 && abs(second / phraseEnergy - 1) < 0.05)
    }

    /// Waiting for a late packet: the tail is continued a pitch period at a time, at the
    /// same pitch, and the audio that follows joins without a step.
    @Test func extendingTheTailContinuesTheWaveform() throws {
        let input = Self.vowel(f0: 140, seconds: 1)
        var buffer = PlayoutAudioBuffer(channels: 1, history: 1_920, capacity: 40_000)
        var stretcher = TimeStretcher()
        _ = buffer.append(upTo: 24_000) { target in
            for index in 0..<24_000 { target[index] = input[index] }
            return 24_000
        }
        var played = [Float](repeating: 0, count: 23_880)
        played.withUnsafeMutableBufferPointer { buffer.read(into: $0) }
        var added = 0
        for _ in 0..<8 where added < 960 { added += stretcher.extend(&buffer, minimum: 120).samples }
        _ = buffer.append(upTo: 9_600) { target in
            for index in 0..<9_600 { target[index] = input[24_000 + index] }
            return 9_600
        }
        var rest = [Float](repeating: 0, count: buffer.pending)
        rest.withUnsafeMutableBufferPointer { buffer.read(into: $0) }
        let output = played + rest
        let measured = Self.fundamental(output, at: 23_000)
        let pitch = try #require(measured)
        print("extended by \(added) samples (\(added / 48) ms); fundamental across the extension \(pitch) Hz")
        #expect(abs(pitch / 140 - 1) < 0.01)
        #expect(output.count == 33_600 + added)
    }
}
