import ParleyAudio
import ParleyBasics
import ParleyDevices
import Synchronization

/// The incoming side, on the playback thread: the output device's clock pulls. Each
/// period the mixer pulls every speaker's jitter buffer, the mix goes to the device, and
/// the very same samples go to the echo canceller's reference tap.
final class PlaybackPipeline {
    static let periodSamples = 480

    private let output: any AudioOutput
    private let mix: PlaybackMix
    private let tap: EchoReferenceTap
    private let status: CallStatus
    private let epoch: UInt64

    init(output: any AudioOutput, mix: PlaybackMix, tap: EchoReferenceTap, status: CallStatus, epoch: UInt64) {
        self.output = output
        self.mix = mix
        self.tap = tap
        self.status = status
        self.epoch = epoch
    }

    /// Runs until `stop` is set; throws when the device fails.
    func run(stop: StopFlag) throws(CallError) {
        var period = [Float](repeating: 0, count: Self.periodSamples)
        var started = false
        while !stop.isRaised {
            let now = MonotonicClock.now()
            let seconds = Double(Int64(bitPattern: now &- epoch)) / 1e9
            period.withUnsafeMutableBufferPointer { mix.mix(into: $0, now: seconds) }
            period.withUnsafeBufferPointer { tap.played($0) }
            if !started {
                started = true
                status.update { $0.playbackStartedAt = now }
            }
            do {
                try period.withUnsafeBufferPointer { try output.write($0) }
            } catch {
                throw .device("the output stopped working: \(error)")
            }
        }
    }
}
