import Foundation
import ParleyAudio
import ParleyBasics
import Synchronization
import Testing

/// Seeded, so every synthetic signal is the same on every run.
typealias SeededGenerator = SplitMix64

extension SplitMix64 {
    /// A standard normal deviate (Box–Muller).
    mutating func gaussian() -> Float {
        let u1 = max(Double.random(in: 0..<1, using: &self), 1e-12)
        let u2 = Double.random(in: 0..<1, using: &self)
        return Float((-2 * log(u1)).squareRoot() * cos(2 * Double.pi * u2))
    }
}

/// Speech for the tests: recorded voice from alsa-utils and synthetic talkers from
/// espeak-ng, generated at test time into a temporary directory and resampled to 48 kHz
/// with SpeexDSP (espeak-ng speaks at 22,050 Hz).
enum TestSpeech {
    struct Unavailable: Error, CustomStringConvertible {
        let description: String
    }

    /// About 9.5 s of a male voice: the far-end talker.
    static let farTalker: Result<[Float], Unavailable> = synthesize(
        voice: "en-us",
        text: """
            The quick brown fox jumps over the lazy dog, and then it runs back home across the field. \
            Every morning the baker opens the shop at six, bakes fresh bread and sells it to the neighbours. \
            Please remember to bring your umbrella tomorrow.
            """)

    /// About 4 s of a second, female voice: the near-end talker in double talk.
    static let nearTalker: Result<[Float], Unavailable> = synthesize(
        voice: "en+f3",
        text: "Sorry to interrupt, but I think we should check the numbers again before Friday.")

    /// One of alsa-utils' recordings (48 kHz mono voice, about 1.4 s).
    static func recorded(_ name: String = "Front_Center") throws -> [Float] {
        let audio = try WAVAudio(contentsOf: "/usr/share/sounds/alsa/\(name).wav")
        #expect(audio.sampleRate == 48_000)
        return audio.mono
    }

    private static func synthesize(voice: String, text: String) -> Result<[Float], Unavailable> {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-speech-\(UUID().uuidString)")
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let path = directory.appendingPathComponent("speech.wav").path
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/espeak-ng")
            process.arguments = ["-v", voice, "-s", "165", "-w", path, text]
            try process.run()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else {
                return .failure(Unavailable(description: "espeak-ng exited with \(process.terminationStatus)"))
            }
            let audio = try WAVAudio(contentsOf: path)
            let speech = try Resampler.resample(audio.mono, from: audio.sampleRate, to: 48_000)
            return .success(normalized(speech, rmsDecibels: -20))
        } catch {
            return .failure(Unavailable(description: "espeak-ng speech could not be made (run Scripts/bootstrap): \(error)"))
        }
    }

    /// Scales `signal` so the RMS over its active part (10 ms frames within 40 dB of the
    /// loudest) is `rmsDecibels` dBFS.
    static func normalized(_ signal: [Float], rmsDecibels: Double) -> [Float] {
        let level = activeRMS(signal)
        guard level > 0 else { return signal }
        let gain = Float(pow(10, rmsDecibels / 20) / level)
        return signal.map { $0 * gain }
    }

    static func activeRMS(_ signal: [Float]) -> Double {
        let frame = 480
        let energies = stride(from: 0, to: signal.count - frame + 1, by: frame).map { start in
            signal[start..<start + frame].reduce(0.0) { $0 + Double($1) * Double($1) } / Double(frame)
        }
        guard let loudest = energies.max(), loudest > 0 else { return 0 }
        let active = energies.filter { $0 >= loudest * 1e-4 }
        return (active.reduce(0, +) / Double(active.count)).squareRoot()
    }
}

/// Synthetic room impulse responses for the echo tests.
///
/// A direct path (one tap at t = 0) followed, from 2 ms on, by exponentially decaying
/// Gaussian noise whose energy falls by 60 dB over `rt60` seconds (amplitude envelope
/// exp(−3·ln10·t/RT60)): the standard statistical model of a diffuse late reverberation
/// (Polack). The diffuse part carries as much energy as the direct path (a
/// direct-to-reverberant ratio of 0 dB, a laptop's speaker and microphone in a small
/// room). The response stops at RT60, where it is 60 dB down.
enum RoomImpulseResponse {
    static func synthetic(rt60: Double, seed: UInt64) -> [Float] {
        var generator = SeededGenerator(seed: seed)
        let rate = 48_000.0
        let length = Int(rt60 * rate)
        var response = [Float](repeating: 0, count: length)
        let start = Int(0.002 * rate)
        var diffuseEnergy: Float = 0
        for index in start..<length {
            let t = Double(index) / rate
            let value = generator.gaussian() * Float(exp(-3 * log(10.0) * t / rt60))
            response[index] = value
            diffuseEnergy += value * value
        }
        let scale = 1 / diffuseEnergy.squareRoot()
        for index in start..<length { response[index] *= scale }
        response[0] = 1
        return response
    }
}

/// An acoustic echo path: the far end convolved with a room response, delayed, scaled to
/// a given echo level relative to the far end, plus the microphone's own noise.
struct EchoScenario {
    let far: [Float]
    let echo: [Float]
    let noise: [Float]

    /// - Parameters:
    ///   - echoLevelDecibels: echo RMS relative to far-end RMS (−3 dB in the acceptance tests).
    ///   - noiseDecibels: microphone self-noise, dBFS (white).
    init(far: [Float], rt60: Double, delayMilliseconds: Int, echoLevelDecibels: Double = -3, noiseDecibels: Double = -70, seed: UInt64 = 1) {
        self.far = far
        let convolved = Self.convolved(far, rt60: rt60, seed: seed)
        let delay = delayMilliseconds * 48
        var echo = [Float](repeating: 0, count: far.count)
        for index in delay..<far.count { echo[index] = convolved[index - delay] }
        // Level set on the convolved signal itself (the delay only shifts it).
        let gain = Float(pow(10, echoLevelDecibels / 20) * TestSpeech.activeRMS(far) / TestSpeech.activeRMS(Array(convolved[0..<far.count])))
        self.echo = echo.map { $0 * gain }
        var generator = SeededGenerator(seed: seed &+ 1_000)
        let noiseScale = Float(pow(10, noiseDecibels / 20))
        noise = (0..<far.count).map { _ in generator.gaussian() * noiseScale }
    }

    /// The far end through the room, cached: the same talker through the same room is
    /// used by many tests (the delay only shifts it), and the convolution is the slow part.
    private static let cache = Mutex<[String: [Float]]>([:])

    private static func convolved(_ far: [Float], rt60: Double, seed: UInt64) -> [Float] {
        // Keyed by a hash of every sample: two signals that differ anywhere (a test that
        // silences part of the talker) must not share a convolution.
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        far.withUnsafeBufferPointer { samples in
            for sample in samples { hash = (hash ^ UInt64(sample.bitPattern)) &* 0x100_0000_01B3 }
        }
        let key = "\(far.count)-\(hash)-\(rt60)-\(seed)"
        return cache.withLock { cache in
            if let cached = cache[key] { return cached }
            let result = FFT.convolve(far, with: RoomImpulseResponse.synthetic(rt60: rt60, seed: seed))
            cache[key] = result
            return result
        }
    }

    /// What the microphone captures: echo, noise and any near-end talker.
    func microphone(near: [Float]? = nil) -> [Float] {
        var mic = zip(echo, noise).map { $0 + $1 }
        if let near {
            for index in 0..<min(near.count, mic.count) { mic[index] += near[index] }
        }
        return mic
    }
}

/// Energy ratio in dB over a range, for echo measurements in far-end single talk.
func energyRatioDecibels(_ numerator: [Float], _ denominator: [Float], in range: Range<Int>) -> Double {
    var a = 0.0, b = 0.0
    for index in range {
        a += Double(numerator[index]) * Double(numerator[index])
        b += Double(denominator[index]) * Double(denominator[index])
    }
    return 10 * log10(a / max(b, 1e-20))
}

/// The Pearson correlation of two signals over their common length, without removing the
/// mean (audio is zero-mean), 0 when either is silent.
func pearsonCorrelation<T: BinaryFloatingPoint>(_ a: [T], _ b: [T]) -> Double {
    var xy = 0.0, xx = 0.0, yy = 0.0
    for (x, y) in zip(a, b) {
        xy += Double(x) * Double(y)
        xx += Double(x) * Double(x)
        yy += Double(y) * Double(y)
    }
    return xx > 0 && yy > 0 ? xy / (xx * yy).squareRoot() : 0
}
