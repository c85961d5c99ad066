import CALSA

/// A microphone (or any ALSA capture PCM): blocking reads of one period at a time, on the
/// capture thread; overruns are recovered with `snd_pcm_recover` and counted.
public final class ALSACapture: AudioInput {
    private let pcm: ALSAPCM

    public init(_ configuration: ALSADeviceConfiguration) throws(DeviceError) {
        pcm = try ALSAPCM(configuration, stream: SND_PCM_STREAM_CAPTURE)
    }

    /// Captures from a PCM the caller opened (e.g. `ClockedPCM`), taking ownership of it.
    init(pcm: ALSAPCM) { self.pcm = pcm }

    public var name: String { pcm.name }
    public var sampleRate: Int { pcm.sampleRate }
    public var channels: Int { pcm.channels }
    public var periodFrames: Int { pcm.periodFrames }
    public var bufferFrames: Int { pcm.bufferFrames }
    public var xruns: Int { pcm.xruns }

    public func read(into output: UnsafeMutableBufferPointer<Float>) throws(DeviceError) -> Int {
        try pcm.read(into: output)
    }
}
