import Foundation

/// Mixes any number of remote speakers into the playback stream: pulls one period from
/// each speaker's source (its jitter buffer), applies that speaker's gain, sums, and
/// limits the sum softly (`SoftLimiter`), so loud talkers together never wrap around or
/// clip hard. Measures each speaker's level for the status line ("who is speaking").
///
/// Driven by the playback device's clock: the playback thread calls `mix` once per
/// period. Not thread-safe: adding or removing a speaker, or changing a gain, from another
/// thread needs the call layer's lock around both.
public final class Mixer<Speaker: Hashable & Sendable> {
    private struct Channel {
        var source: any AudioSource
        var gain: Float
        var levelDecibels: Double = -120
        var lastSpoke: Double = -.infinity
    }

    private var channels: [Speaker: Channel] = [:]
    private var scratch: [Float] = []
    private var limiter: SoftLimiter
    /// Level above which a speaker counts as speaking, dBFS.
    public var speakingThresholdDecibels: Double = -45
    /// How long a speaker stays "speaking" after their level falls (bridges pauses between words).
    public var speakingHangoverSeconds: Double = 0.3

    public init(limiter: SoftLimiter = SoftLimiter()) {
        self.limiter = limiter
    }

    public func add(_ speaker: Speaker, source: any AudioSource, gainDecibels: Double = 0) {
        channels[speaker] = Channel(source: source, gain: Self.linear(gainDecibels))
    }

    public func remove(_ speaker: Speaker) { channels[speaker] = nil }

    public func contains(_ speaker: Speaker) -> Bool { channels[speaker] != nil }

    public var speakers: [Speaker] { Array(channels.keys) }

    /// Sets a speaker's gain (0 dB leaves them as they are; −120 or less mutes).
    public func setGain(_ speaker: Speaker, decibels: Double) {
        channels[speaker]?.gain = Self.linear(decibels)
    }

    /// The speaker's level over the last period, dBFS (before their gain), smoothed: rises
    /// at once, falls by at most 20 dB per second so the meter is readable.
    public func level(of speaker: Speaker) -> Double? { channels[speaker]?.levelDecibels }

    /// Speakers whose level crossed the speaking threshold within the hangover, as of `now`.
    public func speaking(now: Double) -> [Speaker] {
        channels.filter { now - $0.value.lastSpoke <= speakingHangoverSeconds }.map(\.key)
    }

    /// The smallest gain the limiter applied since the last call (1 when it did nothing).
    public func takeLimiterMinimumGain() -> Float {
        defer { limiter.resetMinimumGain() }
        return limiter.minimumGain
    }

    /// Writes the next period (`output.count` samples) of the mix at time `now`.
    public func mix(into output: UnsafeMutableBufferPointer<Float>, now: Double) {
        for index in 0..<output.count { output[index] = 0 }
        if scratch.count < output.count { scratch = [Float](repeating: 0, count: output.count) }
        let period = Double(output.count) / Double(AudioClock.sampleRate)
        // Each speaker's channel is updated in place (through the values' indices): writing
        // back by key while iterating the keys would copy the dictionary, an allocation on
        // the playback thread every period.
        var index = channels.values.startIndex
        while index != channels.values.endIndex {
            let source = channels.values[index].source
            let gain = channels.values[index].gain
            let energy: Double = scratch.withUnsafeMutableBufferPointer { buffer in
                let part = UnsafeMutableBufferPointer(rebasing: buffer[0..<output.count])
                _ = source.read(into: part, now: now)
                var energy = 0.0
                for sample in 0..<part.count {
                    let value = part[sample]
                    energy += Double(value * value)
                    output[sample] += value * gain
                }
                return energy
            }
            let level = 10 * log10(max(energy / Double(output.count), 1e-12))
            channels.values[index].levelDecibels = max(level, channels.values[index].levelDecibels - 20 * period)
            if level >= speakingThresholdDecibels { channels.values[index].lastSpoke = now }
            channels.values.formIndex(after: &index)
        }
        limiter.process(output)
    }

    private static func linear(_ decibels: Double) -> Float {
        decibels <= -120 ? 0 : Float(pow(10, decibels / 20))
    }
}
