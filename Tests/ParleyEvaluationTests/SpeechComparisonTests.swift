import Foundation
import ParleyAudio
import ParleyBasics
import Testing
@testable import ParleyEvaluation

/// What the end-to-end tests and the call-quality benchmark rely on to judge a call: the
/// comparison of what a talker sent with what a listener recorded.
@Suite("Comparing what was heard with what was said")
struct SpeechComparisonTests {
    /// Syllable-like bursts of noise with gaps.
    static func syllables(seconds: Int, seed: UInt64) -> [Float] {
        var generator = SplitMix64(seed: seed)
        var sent = [Float](repeating: 0, count: seconds * 48_000)
        var position = 4_800
        while position < sent.count - 20_000 {
            let length = Int.random(in: 4_000...12_000, using: &generator)
            for index in position..<position + length {
                let envelope = Float(sin(Double.pi * Double(index - position) / Double(length)))
                sent[index] = envelope * (Float(Int.random(in: -1_000...1_000, using: &generator)) / 4_000)
            }
            position += length + Int.random(in: 2_000...8_000, using: &generator)
        }
        return sent
    }

    /// The comparison finds a delay it was given, scores an intact copy near 1, and counts
    /// a 160 ms hole as one dropout.
    @Test func theComparisonMeasuresDelayDropoutsAndMatch() {
        let sent = Self.syllables(seconds: 6, seed: 3)
        let delay = 80 * 48
        let offset = 12_345
        var received = [Float](repeating: 0, count: sent.count + offset + delay + 48_000)
        for (index, sample) in sent.enumerated() { received[index + offset + delay] = sample * 0.7 }
        let intact = SpeechComparison.compare(sent: sent, received: received, offset: offset)
        print("intact: delay \(intact.delayPercentile(0.5) ?? -1) ms, envelope \(intact.envelopeCorrelation), dropouts \(intact.dropouts)")
        #expect(abs((intact.delayPercentile(0.5) ?? 0) - 80) < 2)
        #expect(intact.envelopeCorrelation > 0.99)
        #expect(intact.dropouts == 0 && intact.droppedFrames == 0)

        // Take out 160 ms in the middle of the longest stretch of speech.
        let active = SpectralEnvelope.activeFrames(sent, in: 0..<sent.count / 960 * 960)
        var runs: [[Int]] = []
        for frame in active {
            if let last = runs.last?.last, last + 1 == frame { runs[runs.count - 1].append(frame) } else { runs.append([frame]) }
        }
        let longest = runs.max { $0.count < $1.count }!
        #expect(longest.count >= 12)
        let hole = longest[longest.count / 2 - 4] * 960
        for index in hole..<hole + 8 * 960 { received[index + offset + delay] = 0 }
        let holed = SpeechComparison.compare(sent: sent, received: received, offset: offset)
        print("with a 160 ms hole: dropped \(holed.droppedFrames) frames in \(holed.dropouts) dropouts, envelope \(holed.envelopeCorrelation)")
        #expect(holed.dropouts == 1)
        #expect((5...9).contains(holed.droppedFrames), "the hole's 8 frames, give or take the edges of its window")
    }

    /// A listener whose playback began 2 s after the talker started could not hear those
    /// 2 s: they are not judged.
    @Test func speechBeforeTheListenerJoinedIsNotJudged() {
        let sent = Self.syllables(seconds: 8, seed: 5)
        let joinedLate = 2 * 48_000, delay = 60 * 48
        // The listener's recording starts at its join: sent[i] lands at i − 2 s + 60 ms.
        var received = [Float](repeating: 0, count: sent.count + 48_000)
        for index in joinedLate..<sent.count { received[index - joinedLate + delay] = sent[index] * 0.8 }
        let comparison = SpeechComparison.compare(sent: sent, received: received, offset: -joinedLate)
        print("joined 2 s late: judged from \(comparison.audibleFromSample) samples, \(comparison.activeFrames) frames, dropped \(comparison.droppedFrames), envelope \(comparison.envelopeCorrelation)")
        #expect(comparison.audibleFromSample == joinedLate)
        #expect(comparison.droppedFrames == 0)
        #expect(comparison.envelopeCorrelation > 0.99)
        let everything = SpectralEnvelope.activeFrames(sent, in: 0..<sent.count / 960 * 960).count
        #expect(comparison.activeFrames < everything, "the first 2 s are left out")
    }

    /// A turn that began at one delay and went on at another (the buffer added room for
    /// repairs after its first losses) is aligned on both sides of the step: a context
    /// reaching past the step once pulled the first windows to the later lag, where they
    /// matched nothing (a wifi-bad demo pair scored 0.76 with its words intact).
    @Test func aStepInTheDelaySoonAfterATurnBeginsDoesNotUnmatchItsFirstWindows() {
        let sent = Self.syllables(seconds: 8, seed: 11)
        let offset = 4_800, before = 95 * 48, after = 160 * 48, step = 38_400
        var received = [Float](repeating: 0, count: sent.count + offset + after + 48_000)
        for (index, sample) in sent.enumerated() { received[index + offset + (index < step ? before : after)] = sample * 0.7 }
        let comparison = SpeechComparison.compare(sent: sent, received: received, offset: offset)
        let lags = comparison.windows.map { $0.delay.map { Int(($0 / 48).rounded()) } }
        print("a step from 95 to 160 ms at 0.8 s: lags \(lags), envelope \(comparison.envelopeCorrelation)")
        #expect(comparison.unmatchedWindows == 0)
        #expect(comparison.windows.filter { $0.start + 19_200 <= step }.allSatisfy { $0.delay.map { abs($0 / 48 - 95) < 5 } ?? true },
                "the windows before the step at its lag")
        #expect(comparison.envelopeCorrelation > 0.95)
    }

    /// A lone window a second away from neighbours that agree matched something else and is
    /// searched again; a step in the delay that the following windows share (a spike) is real.
    @Test func aLoneWindowFarFromItsNeighboursIsAnOutlierButAStepIsNot() {
        func windows(_ milliseconds: [Double?]) -> [SpeechComparison.Window] {
            milliseconds.enumerated().map { index, lag in
                SpeechComparison.Window(start: index * 19_200, delay: lag.map { $0 * 48 }, match: lag == nil ? 0 : 0.9)
            }
        }
        // What a loss-20 call's comparison once found: the call's first window at 1,069 ms.
        func outliers(_ milliseconds: [Double?]) -> [Int] { SpeechComparison.isolatedOutliers(windows(milliseconds)).map(\.index) }
        #expect(outliers([nil, 1_069, nil, nil, 108, 112, 106]) == [1])
        #expect(SpeechComparison.isolatedOutliers(windows([nil, 1_069, nil, nil, 108, 112, 106])).first?.neighbourLag == Double(110 * 48))
        #expect(outliers([100, 104, 420, 98, 101]) == [2])
        // A 300 ms spike: the delay steps up and stays.
        #expect(outliers([100, 100, 400, 400, 400]).isEmpty)
        // Neighbours that disagree say nothing; nor do too few windows.
        #expect(outliers([100, 250, 400]).isEmpty)
        #expect(outliers([900, 100]).isEmpty)
        // Small moves (time-stretch, a short underrun) are not outliers.
        #expect(outliers([100, 160, 104, 110]).isEmpty)
    }

}
