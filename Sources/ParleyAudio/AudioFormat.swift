/// The one sample rate the audio engine runs at: Opus's native rate and the RTP clock
/// (RFC 7587). Every device, file and stage converts to it at the edge.
public enum AudioClock {
    /// Samples per second per channel.
    public static let sampleRate = 48_000

    /// Samples in `milliseconds` of audio at `sampleRate`.
    public static func samples(milliseconds: Int) -> Int { milliseconds * sampleRate / 1_000 }

    /// Milliseconds in `samples` samples at `sampleRate`.
    public static func milliseconds(samples: Int) -> Double { Double(samples) * 1_000 / Double(sampleRate) }
}

/// Converts between the two sample representations the engine uses: `Int16` (SpeexDSP,
/// ALSA, 16-bit WAV) and `Float` in −1…1 (Opus, the mixer, 32-bit WAV).
public enum SampleConversion {
    /// Rounds (halves away from zero) and saturates; a value outside −1…1 becomes full
    /// scale, never wraps around. Adding ±0.5 before the conversion's truncation rounds as
    /// `rounded()` does, without its call into libm: the capture thread converts every
    /// sample twice a frame.
    @inline(__always)
    public static func int16(_ value: Float) -> Int16 {
        let scaled = value * 32_768
        if scaled >= 32_767 { return 32_767 }
        if scaled <= -32_768 { return -32_768 }
        return Int16(scaled + (scaled < 0 ? -0.5 : 0.5))
    }

    @inline(__always)
    public static func float(_ value: Int16) -> Float { Float(value) / 32_768 }

    public static func int16(_ values: [Float]) -> [Int16] { values.map(int16) }
    public static func float(_ values: [Int16]) -> [Float] { values.map(float) }
}
