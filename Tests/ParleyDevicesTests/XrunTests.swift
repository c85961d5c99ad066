import Foundation
import ParleyDevices
import Testing

/// Acceptance 3, xruns. The `file` plugin over a `null` slave never underruns or overruns:
/// it takes and gives data as fast as asked (measured: a playback PCM on it stays
/// PREPARED with its whole buffer free however long it is left). So xruns are injected on
/// `ClockedPCM`, an in-process ALSA PCM (alsa-lib's ioplug layer) whose position follows
/// the monotonic clock: stop feeding it for longer than its buffer and alsa-lib reports
/// -EPIPE exactly as for a sound card; the device recovers with `snd_pcm_recover`.
@Suite("ALSA xruns")
struct XrunTests {
    /// Playback: four periods queued, then nothing for 150 ms against a 40 ms buffer.
    @Test func playbackUnderrunIsRecoveredAndCounted() throws {
        let playback = try ALSAPlayback.clocked()
        let period = [Float](repeating: 0.1, count: playback.periodFrames)
        for _ in 0..<4 { try period.withUnsafeBufferPointer { try playback.write($0) } }
        #expect(playback.xruns == 0)
        Thread.sleep(forTimeInterval: 0.150)
        // The next write meets the underrun, recovers and plays on.
        for _ in 0..<8 { try period.withUnsafeBufferPointer { try playback.write($0) } }
        print("playback xruns after a 150 ms stall: \(playback.xruns)")
        // At least one: a loaded machine may add a late wake-up of its own.
        #expect(playback.xruns >= 1)
        #expect(playback.xruns <= 3)
        // Recovered: it keeps taking audio in real time.
        let start = Date()
        for _ in 0..<30 { try period.withUnsafeBufferPointer { try playback.write($0) } }
        #expect(Date().timeIntervalSince(start) >= 0.2)
    }

    /// Capture: one period read, then nothing read for 150 ms against a 40 ms buffer.
    @Test func captureOverrunIsRecoveredAndCounted() throws {
        let capture = try ALSACapture.clocked()
        var period = [Float](repeating: 1, count: capture.periodFrames)
        let first = try period.withUnsafeMutableBufferPointer { try capture.read(into: $0) }
        #expect(first == capture.periodFrames)
        Thread.sleep(forTimeInterval: 0.150)
        for _ in 0..<5 {
            let frames = try period.withUnsafeMutableBufferPointer { try capture.read(into: $0) }
            #expect(frames == capture.periodFrames)
        }
        print("capture xruns after a 150 ms stall: \(capture.xruns)")
        #expect(capture.xruns >= 1 && capture.xruns <= 3)
        #expect(period.allSatisfy { $0 == 0 }, "the clocked capture delivers silence")
    }

    /// The clocked device keeps real time: 25 periods of 10 ms take about 250 ms.
    @Test func clockedPlaybackRunsInRealTime() throws {
        let playback = try ALSAPlayback.clocked()
        let period = [Float](repeating: 0, count: playback.periodFrames)
        let start = Date()
        for _ in 0..<29 { try period.withUnsafeBufferPointer { try playback.write($0) } }
        let elapsed = Date().timeIntervalSince(start)
        // 29 periods, of which the buffer (4) absorbs the first at once: ≥ 25 × 10 ms.
        print("29 periods written in \(elapsed) s (expected at least 0.24 s)")
        #expect(elapsed >= 0.24 && elapsed < 2)
    }
}
