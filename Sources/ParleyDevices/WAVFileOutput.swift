import ParleyAudio
import Synchronization

/// A WAV file as a speaker: what is played is written to the file as it comes (through
/// ``WAVFileWriter``, so a long call takes no more memory than a short one), paced in real
/// time like a sound card or as fast as written. ``drain()`` completes the file's header.
public final class WAVFileOutput: AudioOutput {
    public let path: String
    public let sampleRate: Int
    public let channels: Int
    public let periodFrames: Int
    public var xruns: Int { 0 }
    private let pacing: Pacing
    private let state: Mutex<(writer: WAVFileWriter, pacer: RealTimePacer)>

    /// Creates the file at once, so a path that cannot be written fails before the call starts.
    public init(
        path: String, sampleRate: Int = 48_000, channels: Int = 1, periodFrames: Int = 480,
        encoding: WAVAudio.Encoding = .pcm16, pacing: Pacing
    ) throws(DeviceError) {
        guard channels == 1 || channels == 2 else { throw DeviceError("\(channels) channels requested; files are written as 1 or 2") }
        self.path = path
        self.sampleRate = sampleRate
        self.channels = channels
        self.periodFrames = periodFrames
        self.pacing = pacing
        let writer: WAVFileWriter
        do {
            writer = try WAVFileWriter(path: path, sampleRate: sampleRate, channels: channels, encoding: encoding)
        } catch {
            throw DeviceError("\(error)")
        }
        state = Mutex((writer, RealTimePacer(sampleRate: sampleRate)))
    }

    public func write(_ samples: UnsafeBufferPointer<Float>) throws(DeviceError) {
        let failure: WAVError? = state.withLock { state in
            do throws(WAVError) { try state.writer.append(samples) } catch { return error }
            if pacing == .realTime { state.pacer.advance(by: samples.count / channels) }
            return nil
        }
        if let failure { throw DeviceError("\(failure)") }
    }

    public func drain() throws(DeviceError) {
        let failure: WAVError? = state.withLock { state in
            do throws(WAVError) { try state.writer.close() } catch { return error }
            return nil
        }
        if let failure { throw DeviceError("\(failure)") }
    }
}
