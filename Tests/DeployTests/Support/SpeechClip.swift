import ParleyAudio

/// Recorded speech as a caller sends it: 48 kHz mono, cut into 20 ms frames, Opus-encoded
/// the way the client does (VOIP, 32 kb/s, in-band FEC).
struct SpeechClip {
    let name: String
    let samples: [Float]
    let frames: [[UInt8]]
    /// Samples the encoder delays its output by; the decoded audio lags the original by this.
    let lookahead: Int

    static let frameSamples = 960

    init(wav path: String) throws {
        let audio = try WAVAudio(contentsOf: path)
        guard audio.sampleRate == 48_000 else { throw TestFailure("\(path) is \(audio.sampleRate) Hz; the test needs 48 kHz speech") }
        name = String(path.split(separator: "/").last ?? "")
        let mono = audio.mono
        let frameCount = mono.count / Self.frameSamples
        let clip = Array(mono.prefix(frameCount * Self.frameSamples))
        let encoder = try OpusEncoder()
        lookahead = encoder.lookahead
        frames = try (0..<frameCount).map { index in
            try encoder.encode(Array(clip[index * Self.frameSamples..<(index + 1) * Self.frameSamples]))
        }
        samples = clip
    }

    /// What a listener hears from `payloads`, decoded in order.
    static func decode(_ payloads: [[UInt8]]) throws -> [Float] {
        let decoder = try OpusDecoder()
        var output: [Float] = []
        var frame = [Float](repeating: 0, count: 5760)
        for payload in payloads {
            let count = try payload.withUnsafeBytes { packet in
                try frame.withUnsafeMutableBufferPointer { try decoder.decode(packet, into: $0) }
            }
            output += frame[..<count]
        }
        return output
    }

    /// Normalised correlation between the original speech and what was heard, with the
    /// codec's delay taken out: 1 is the same waveform, 0 unrelated.
    func similarity(toHeard heard: [Float]) -> Double {
        let count = min(samples.count, heard.count - lookahead)
        guard count > 0 else { return 0 }
        var product = 0.0, originalEnergy = 0.0, heardEnergy = 0.0
        for index in 0..<count {
            let original = Double(samples[index]), received = Double(heard[index + lookahead])
            product += original * received
            originalEnergy += original * original
            heardEnergy += received * received
        }
        guard originalEnergy > 0, heardEnergy > 0 else { return 0 }
        return product / (originalEnergy * heardEnergy).squareRoot()
    }

    /// Root-mean-square level in dBFS, to tell speech from silence.
    static func level(_ samples: [Float]) -> Double {
        guard !samples.isEmpty else { return -.infinity }
        let meanSquare = samples.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(samples.count)
        return 10 * log10(max(meanSquare, 1e-20))
    }
}

#if canImport(Glibc)
import Glibc
#endif
