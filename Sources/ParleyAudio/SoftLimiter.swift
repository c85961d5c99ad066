import Foundation

/// Keeps a mix within full scale by turning the gain down, never by wrapping or hard
/// clipping: a feed-forward peak limiter with instant attack (the gain for a sample is
/// computed from that sample, so no output sample exceeds the ceiling) and an exponential
/// release, so the gain recovers smoothly over ~`releaseMilliseconds` after a peak.
///
/// Plain Swift; owned by the mixer on the playback thread.
public struct SoftLimiter: Sendable {
    /// The largest magnitude the output reaches, linear (0.891 = −1 dBFS).
    public let ceiling: Float
    private let release: Float
    private var envelope: Float = 0
    /// The smallest gain applied since the last `resetMinimumGain()`, for metering.
    public private(set) var minimumGain: Float = 1

    public init(ceilingDecibels: Float = -1, releaseMilliseconds: Float = 80) {
        ceiling = pow(10, ceilingDecibels / 20)
        release = exp(-1 / (releaseMilliseconds / 1_000 * Float(AudioClock.sampleRate)))
    }

    public mutating func process(_ samples: UnsafeMutableBufferPointer<Float>) {
        for index in 0..<samples.count {
            let sample = samples[index]
            let magnitude = abs(sample)
            // Attack at once, release slowly.
            envelope = magnitude > envelope ? magnitude : envelope * release + magnitude * (1 - release)
            if envelope > ceiling {
                let gain = ceiling / envelope
                samples[index] = sample * gain
                if gain < minimumGain { minimumGain = gain }
            }
        }
    }

    public mutating func resetMinimumGain() { minimumGain = 1 }
}
