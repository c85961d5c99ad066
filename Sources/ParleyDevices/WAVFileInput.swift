import ParleyAudio
import Synchronization

/// A WAV file as a microphone: delivers the file's audio (resampled to the requested rate
/// with SpeexDSP if it differs) one read at a time, paced in real time like a sound card
/// or as fast as asked. At the end it returns what is left, then 0.
public final class WAVFileInput: AudioInput {
    public let sampleRate: Int
    public let channels: Int
    public let periodFrames: Int
    public var xruns: Int { 0 }
    private let samples: [Float]
    private let position: Mutex<(next: Int, pacer: RealTimePacer)>
    private let pacing: Pacing

    /// - Parameters:
    ///   - channels: 1 or 2; a stereo file read as mono is mixed down, a mono file read as
    ///     stereo is duplicated.
    public init(path: String, sampleRate: Int = 48_000, channels: Int = 1, periodFrames: Int = 480, pacing: Pacing) throws(DeviceError) {
        let audio: WAVAudio
        do {
            audio = try WAVAudio(contentsOf: path)
        } catch {
            throw DeviceError("cannot use \(path) as input: \(error)")
        }
        guard channels == 1 || channels == 2 else { throw DeviceError("\(channels) channels requested; files are read as 1 or 2") }
        var mono = audio.mono
        if audio.sampleRate != sampleRate {
            do {
                mono = try Resampler.resample(mono, from: audio.sampleRate, to: sampleRate)
            } catch {
                throw DeviceError("cannot resample \(path) from \(audio.sampleRate) Hz: \(error)")
            }
        }
        if channels == 2 {
            if audio.channels == 2 && audio.sampleRate == sampleRate {
                samples = audio.samples
            } else {
                samples = mono.flatMap { [$0, $0] }
            }
        } else {
            samples = mono
        }
        self.sampleRate = sampleRate
        self.channels = channels
        self.periodFrames = periodFrames
        self.pacing = pacing
        position = Mutex((0, RealTimePacer(sampleRate: sampleRate)))
    }

    /// Frames in the file (at `sampleRate`).
    public var frameCount: Int { samples.count / channels }

    public func read(into output: UnsafeMutableBufferPointer<Float>) throws(DeviceError) -> Int {
        let wanted = output.count / channels
        return position.withLock { state in
            let available = min(wanted, (samples.count - state.next) / channels)
            for index in 0..<available * channels { output[index] = samples[state.next + index] }
            state.next += available * channels
            if pacing == .realTime && available > 0 { state.pacer.advance(by: available) }
            return available
        }
    }
}
