import Foundation
import ParleyAudio
import Testing

@Suite("Delay estimator")
struct DelayEstimatorTests {
    /// Feeds `far` and `mic` in 10 ms blocks; returns the estimate after each block.
    static func run(_ estimator: DelayEstimator, far: [Float], mic: [Float]) -> [DelayEstimator.Estimate?] {
        var history = [DelayEstimator.Estimate?]()
        far.withUnsafeBufferPointer { farBuffer in
            mic.withUnsafeBufferPointer { micBuffer in
                for start in stride(from: 0, to: far.count - 479, by: 480) {
                    history.append(
                        estimator.process(
                            far: UnsafeBufferPointer(rebasing: farBuffer[start..<start + 480]),
                            capture: UnsafeBufferPointer(rebasing: micBuffer[start..<start + 480])))
                }
            }
        }
        return history
    }

    /// Across the search range (0–500 ms): the delay of a reverberant echo path is found
    /// within 1 ms, in under 2 s of far-end speech (4 s are fed). 20, 60 and 150 ms are
    /// also checked, with the canceller, by `EchoCancellationTests`.
    @Test(arguments: [0, 150, 320, 480])
    func findsTheBulkDelayAcrossTheSearchRange(delay: Int) throws {
        let far = Array(try TestSpeech.farTalker.get().prefix(4 * 48_000))
        let scenario = EchoScenario(far: far, rt60: 0.3, delayMilliseconds: delay)
        let estimator = DelayEstimator()
        let history = Self.run(estimator, far: far, mic: scenario.microphone())
        let estimate = try #require(estimator.estimate, "no estimate for \(delay) ms")
        let first = history.firstIndex { $0 != nil }.map { Double($0 + 1) * 0.01 } ?? .infinity
        print("true \(delay) ms: estimated \(estimate.milliseconds) ms (confidence \(estimate.confidence)), first after \(first) s, changes \(estimator.changes)")
        #expect(abs(estimate.milliseconds - Double(delay)) <= 1)
        #expect(first <= 2)
        #expect(estimator.changes == 0)
    }

    /// Double talk and far-end silence do not make it hop: with a second voice as loud as
    /// the echo talking over half the time, and the far end silent for 2 s, the estimate is
    /// the true 60 ms from the first to the last block.
    @Test func doesNotHopInDoubleTalkOrSilence() throws {
        let far = try TestSpeech.farTalker.get()
        var gappedFar = far
        for index in 3 * 48_000..<5 * 48_000 { gappedFar[index] = 0 }
        let scenario = EchoScenario(far: gappedFar, rt60: 0.4, delayMilliseconds: 60)
        let near = try TestSpeech.nearTalker.get()
        let level = Float(TestSpeech.activeRMS(scenario.echo) / TestSpeech.activeRMS(near))
        var nearTrack = [Float](repeating: 0, count: far.count)
        for (offset, start) in [(0, 48_000), (0, 5 * 48_000)] {
            for index in 0..<near.count where start + index < far.count { nearTrack[start + index] += near[offset + index] * level }
        }
        let estimator = DelayEstimator()
        let history = Self.run(estimator, far: gappedFar, mic: scenario.microphone(near: nearTrack))
        let published = history.compactMap { $0?.milliseconds }
        print("published estimates: \(Set(published).sorted()) ms over \(published.count) blocks; changes \(estimator.changes)")
        #expect(!published.isEmpty)
        #expect(published.allSatisfy { abs($0 - 60) <= 1 })
        #expect(estimator.changes == 0)
    }

    /// When the delay really changes (another device, a restarted sound server), the
    /// estimate follows within 3 s and changes once.
    @Test func followsARealChangeOfDelay() throws {
        let far = try TestSpeech.farTalker.get()
        let before = EchoScenario(far: far, rt60: 0.2, delayMilliseconds: 60).microphone()
        let after = EchoScenario(far: far, rt60: 0.2, delayMilliseconds: 110).microphone()
        let switchAt = 4 * 48_000
        let mic = Array(before[..<switchAt]) + Array(after[switchAt...])
        let estimator = DelayEstimator()
        let history = Self.run(estimator, far: far, mic: mic)
        let moved = history.indices.first { $0 * 480 >= switchAt && abs((history[$0]?.milliseconds ?? 0) - 110) <= 1 }
        let seconds = moved.map { Double($0 * 480 - switchAt) / 48_000 } ?? .infinity
        print("delay 60 → 110 ms at 4 s: followed after \(seconds) s; changes \(estimator.changes)")
        #expect(seconds <= 3)
        #expect(estimator.changes == 1)
    }

    /// No echo, no estimate: a microphone that hears only someone else never produces one.
    @Test func noEchoGivesNoEstimate() throws {
        let far = Array(try TestSpeech.farTalker.get().prefix(5 * 48_000))
        let near = try TestSpeech.nearTalker.get()
        let mic = (0..<far.count).map { near[$0 % near.count] }
        let estimator = DelayEstimator()
        _ = Self.run(estimator, far: far, mic: mic)
        #expect(estimator.estimate == nil, "estimated \(estimator.estimate?.milliseconds ?? 0) ms from no echo at all")
    }
}
