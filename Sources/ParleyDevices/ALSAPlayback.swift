import CALSA

/// A speaker (or any ALSA playback PCM): blocking writes on the playback thread;
/// underruns are recovered with `snd_pcm_recover` and counted. Samples are saturated to
/// 16 bits, never wrapped.
public final class ALSAPlayback: AudioOutput {
    private let pcm: ALSAPCM

    public init(_ configuration: ALSADeviceConfiguration) throws(DeviceError) {
        pcm = try ALSAPCM(configuration, stream: SND_PCM_STREAM_PLAYBACK)
    }

    /// Plays through a PCM the caller opened (e.g. `ClockedPCM`), taking ownership of it.
    init(pcm: ALSAPCM) { self.pcm = pcm }

    public var name: String { pcm.name }
    public var sampleRate: Int { pcm.sampleRate }
    public var channels: Int { pcm.channels }
    public var periodFrames: Int { pcm.periodFrames }
    public var bufferFrames: Int { pcm.bufferFrames }
    public var xruns: Int { pcm.xruns }

    public func write(_ samples: UnsafeBufferPointer<Float>) throws(DeviceError) {
        try pcm.write(samples)
    }

    public func drain() throws(DeviceError) { try pcm.drain() }
}
