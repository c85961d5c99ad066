import Foundation

/// Measures how much echo a canceller removed, for `parley process`, the tests and the
/// benchmark.
public enum EchoMeasurement {
    /// Echo return loss enhancement over the 10 ms frames at or after `from` in which the
    /// far end (delayed by `farDelaySamples`) plays: 10·log10(mic energy / output energy).
    /// A frame counts as "far end plays" when its far-end level is within 40 dB of the
    /// loudest far-end frame. Nil when no frame qualifies.
    public static func erle(
        mic: [Float], output: [Float], far: [Float], farDelaySamples: Int, from start: Int
    ) -> (decibels: Double, seconds: Double)? {
        let frame = AudioClock.samples(milliseconds: 10)
        let count = min(mic.count, output.count, far.count)
        guard count >= frame else { return nil }
        var farLevels = [Double]()
        var frameStarts = [Int]()
        var loudest = 0.0
        var position = 0
        while position + frame <= count {
            var energy = 0.0
            for index in position..<position + frame {
                let source = index - farDelaySamples
                if source >= 0 { energy += Double(far[source]) * Double(far[source]) }
            }
            farLevels.append(energy)
            frameStarts.append(position)
            loudest = max(loudest, energy)
            position += frame
        }
        guard loudest > 0 else { return nil }
        var micEnergy = 0.0
        var outEnergy = 0.0
        var used = 0
        for (level, begin) in zip(farLevels, frameStarts) where begin >= start && level >= loudest * 1e-4 {
            for index in begin..<begin + frame {
                micEnergy += Double(mic[index]) * Double(mic[index])
                outEnergy += Double(output[index]) * Double(output[index])
            }
            used += 1
        }
        guard used > 0, micEnergy > 0 else { return nil }
        // An output of exact zeros would be infinite ERLE; floor it at 16-bit quantisation.
        let floor = Double(used * frame) * pow(1.0 / 65_536, 2)
        return (10 * log10(micEnergy / max(outEnergy, floor)), Double(used * frame) / Double(AudioClock.sampleRate))
    }
}
