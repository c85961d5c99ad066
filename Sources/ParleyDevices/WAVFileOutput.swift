import ParleyAudio
import Synchronization

/// A WAV file as a speaker: collects what is played, paced in real time like a sound card
/// or as fast as written, and writes the file on `drain()` (16-bit PCM unless asked
/// otherwise).
public final class WAVFileOutput: AudioOutput {
    public let path: String
    public let sampleRate: Int
    public let channels: Int
    public let periodFrames: Int
    public var xruns: Int { 0 }
    private let encoding: WAVAudio.Encoding
    private let pacing: Pacing
    private let state: Mutex<(samples: [Float], pacer: RealTimePacer)>

    public init(
        path: String, sampleRate: Int = 48_000, channels: Int = 1, periodFrames: Int = 480,
        encoding: WAVAudio.Encoding = .pcm16, pacing: Pacing
    ) throws(DeviceError) {
        guard channels == 1 || channels == 2 else { throw DeviceError("\(channels) channels requested; files are written as 1 or 2") }
        self.path = path
        self.sampleRate = sampleRate
        self.channels = channels
        self.periodFrames = periodFrames
        self.encoding = encoding
        self.pacing = pacing
        state = Mutex(([], RealTimePacer(sampleRate: sampleRate)))
    }

    public func write(_ samples: UnsafeBufferPointer<Float>) throws(DeviceError) {
        state.withLock { state in
            state.samples.append(contentsOf: samples)
            if pacing == .realTime { state.pacer.advance(by: samples.count / channels) }
        }
    }

    /// What has been played so far.
    public var played: [Float] { state.withLock { $0.samples } }

    public func drain() throws(DeviceError) {
        let samples = played
        do {
            try WAVAudio(sampleRate: sampleRate, channels: channels, samples: samples, encoding: encoding).write(to: path)
        } catch {
            throw DeviceError("\(error)")
        }
    }
}
