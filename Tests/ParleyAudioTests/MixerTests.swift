import Foundation
import ParleyAudio
import Testing

/// A source that plays a fixed signal, then silence: what a speaker's jitter buffer hands
/// the mixer, without the network.
final class SignalSource: AudioSource {
    private let signal: [Float]
    private var position = 0

    init(_ signal: [Float]) { self.signal = signal }

    func read(into output: UnsafeMutableBufferPointer<Float>, now: Double) -> Bool {
        for index in 0..<output.count {
            output[index] = position < signal.count ? signal[position] : 0
            position += 1
        }
        return position <= signal.count
    }
}

@Suite("Mixer")
struct MixerTests {
    static func tone(_ frequency: Double, amplitude: Float, seconds: Double = 1) -> [Float] {
        (0..<Int(seconds * 48_000)).map { amplitude * Float(sin(2 * Double.pi * frequency * Double($0) / 48_000)) }
    }

    static func mix(_ mixer: Mixer<Int>, seconds: Double) -> [Float] {
        var output = [Float]()
        var period = [Float](repeating: 0, count: 480)
        for index in 0..<Int(seconds * 100) {
            period.withUnsafeMutableBufferPointer { mixer.mix(into: $0, now: Double(index) * 0.01) }
            output += period
        }
        return output
    }

    /// Three loud talkers at once (their sum peaks near 2.4× full scale): the mix stays
    /// under the limiter's ceiling, keeps the sign of the true sum everywhere (no
    /// wrap-around), and still follows the sum's shape.
    @Test func loudSpeakersTogetherAreLimitedNotWrapped() {
        let mixer = Mixer<Int>()
        let tones = [Self.tone(220, amplitude: 0.8), Self.tone(330, amplitude: 0.8), Self.tone(440, amplitude: 0.8)]
        for (index, tone) in tones.enumerated() { mixer.add(index, source: SignalSource(tone)) }
        let output = Self.mix(mixer, seconds: 1)
        let sum = (0..<output.count).map { tones[0][$0] + tones[1][$0] + tones[2][$0] }
        let peak = output.map(abs).max()!
        let flipped = zip(output, sum).filter { abs($0.1) > 0.05 && ($0.0 > 0) != ($0.1 > 0) }.count
        let correlation = pearsonCorrelation(output, sum)
        let int16Peak = output.map { abs(Int(SampleConversion.int16($0))) }.max()!
        print("sum peaks at \(sum.map(abs).max()!), mix at \(peak) (ceiling 0.891); sign flips \(flipped); correlation with the sum \(correlation); 16-bit peak \(int16Peak)")
        #expect(peak <= 0.8913)
        #expect(flipped == 0)
        #expect(correlation > 0.95)
        #expect(int16Peak < 32_767)
    }

    /// Beyond full scale, conversion to 16 bits saturates; it never wraps to the other sign.
    @Test func sixteenBitConversionSaturates() {
        #expect(SampleConversion.int16(1.7) == 32_767)
        #expect(SampleConversion.int16(-3) == -32_768)
        #expect(SampleConversion.int16(0.5) == 16_384)
    }

    /// A speaker's gain changes only that speaker: −6 dB halves their amplitude in the mix.
    @Test func perSpeakerGainAppliesToThatSpeakerOnly() {
        let mixer = Mixer<Int>()
        mixer.add(1, source: SignalSource(Self.tone(300, amplitude: 0.1)))
        mixer.add(2, source: SignalSource(Self.tone(1_000, amplitude: 0.1)), gainDecibels: -6.0206)
        let output = Self.mix(mixer, seconds: 1)
        // Project the mix on each tone to measure each speaker's amplitude in it.
        func amplitude(_ frequency: Double) -> Double {
            var s = 0.0, c = 0.0
            for (index, value) in output.enumerated() {
                let phase = 2 * Double.pi * frequency * Double(index) / 48_000
                s += Double(value) * sin(phase)
                c += Double(value) * cos(phase)
            }
            return 2 * (s * s + c * c).squareRoot() / Double(output.count)
        }
        let first = amplitude(300), second = amplitude(1_000)
        print("speaker 1 at \(first), speaker 2 (−6 dB) at \(second)")
        #expect(abs(first - 0.1) < 0.002)
        #expect(abs(second - 0.05) < 0.002)
    }

    /// Levels per speaker tell who is speaking: the one talking is listed, the silent one
    /// is not, and the talker drops off the list after the hangover once they stop.
    @Test func levelPerSpeakerTellsWhoIsSpeaking() throws {
        let speech = try TestSpeech.recorded()
        let mixer = Mixer<Int>()
        mixer.add(7, source: SignalSource(speech))
        mixer.add(8, source: SignalSource([]))
        var period = [Float](repeating: 0, count: 480)
        var speakingDuringSpeech = Set<Int>()
        let speechEnd = Double(speech.count) / 48_000
        for index in 0..<Int((speechEnd + 1) * 100) {
            let now = Double(index) * 0.01
            period.withUnsafeMutableBufferPointer { mixer.mix(into: $0, now: now) }
            if now > 0.3 && now < speechEnd - 0.1 { speakingDuringSpeech.formUnion(mixer.speaking(now: now)) }
        }
        let after = mixer.speaking(now: speechEnd + 1)
        print("speaking during speech: \(speakingDuringSpeech.sorted()), one second after: \(after); levels \(mixer.level(of: 7)!) / \(mixer.level(of: 8)!) dBFS")
        #expect(speakingDuringSpeech == [7])
        #expect(after.isEmpty)
        #expect(mixer.level(of: 8)! < -100)
    }
}
