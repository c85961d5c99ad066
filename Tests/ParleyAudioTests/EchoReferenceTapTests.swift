import Testing
import ParleyAudio

@Suite("The echo canceller's reference tap")
struct EchoReferenceTapTests {
    /// Once anchored, the reference moves sample for sample with the capture, whatever
    /// the two threads' phase, so the canceller's filter sees one fixed echo path.
    @Test func theReferenceMovesInLockStepWithTheCapture() {
        let tap = EchoReferenceTap()
        var played = 0
        func play(_ periods: Int) {
            for _ in 0..<periods {
                let samples = (0..<480).map { Float(played + $0) }
                samples.withUnsafeBufferPointer { tap.played($0) }
                played += 480
            }
        }
        play(10)
        var reference = [Float](repeating: 0, count: 480)
        var starts: [Int] = []
        for frame in 0..<100 {
            // Scheduling jitter: playback runs one period ahead or behind now and then.
            play(frame % 7 == 0 ? 2 : frame % 7 == 3 ? 0 : 1)
            reference.withUnsafeMutableBufferPointer { tap.reference(captureIndex: frame * 480, into: $0) }
            starts.append(Int(reference[0]) - frame * 480)
            #expect(zip(reference, reference.dropFirst()).allSatisfy { $1 - $0 == 1 }, "a contiguous stretch of what was played")
        }
        #expect(Set(starts).count == 1, "one constant offset, got \(Set(starts))")
        #expect(tap.realignments == 0)
    }

    @Test func aLastingChangeOfOffsetIsFollowedAndSilenceFillsWhatWasNeverPlayed() {
        let tap = EchoReferenceTap(realignAfter: 5)
        var reference = [Float](repeating: 1, count: 480)
        reference.withUnsafeMutableBufferPointer { tap.reference(captureIndex: 0, into: $0) }
        #expect(reference.allSatisfy { $0 == 0 }, "nothing played yet")
        let ones = [Float](repeating: 1, count: 480)
        for _ in 0..<4 { ones.withUnsafeBufferPointer { tap.played($0) } }
        for frame in 0..<20 {
            // Capture stalls for 50 ms (an xrun) at frame 10: its index jumps.
            let index = frame < 10 ? frame * 480 : frame * 480 + 2_400
            ones.withUnsafeBufferPointer { tap.played($0) }
            reference.withUnsafeMutableBufferPointer { tap.reference(captureIndex: index, into: $0) }
        }
        #expect(tap.realignments == 1)
    }

    /// The playback thread of a busy machine falls three periods behind now and then, and
    /// catches up. Read at the echo's delay (50 ms here), the reference is still every sample
    /// that was played, in order: nothing not yet played when the capture frame came in is
    /// lost, although its echo reaches the microphone all the same.
    @Test func aPlaybackThreadRunningLateLosesNothingReadAtTheEchosDelay() {
        let tap = EchoReferenceTap()
        var played = 0
        func play(_ periods: Int) {
            for _ in 0..<periods {
                let samples = (0..<480).map { Float(played + $0 + 1) }
                samples.withUnsafeBufferPointer { tap.played($0) }
                played += 480
            }
        }
        play(2)
        let delay = 2_400
        var reference = [Float](repeating: 0, count: 480)
        var delayed: [Float] = []
        var now: [Float] = []
        for frame in 0..<200 {
            // Every 20th frame playback stalls for three periods, then plays four at once.
            play(frame % 20 < 3 ? 0 : frame % 20 == 3 ? 4 : 1)
            let view = tap.frame(captureIndex: frame * 480, count: 480)
            reference.withUnsafeMutableBufferPointer { view.read(delay: 0, into: $0) }
            now += reference
            reference.withUnsafeMutableBufferPointer { view.read(delay: delay, into: $0) }
            if frame * 480 >= delay { delayed += reference }
        }
        #expect(now.contains(0), "read as it is captured, a stalled playback leaves holes")
        #expect(!delayed.contains(0), "read at the echo's delay, no hole")
        #expect(zip(delayed, delayed.dropFirst()).allSatisfy { $1 - $0 == 1 }, "every sample played, in order")
        #expect(tap.realignments == 0)
    }
}
