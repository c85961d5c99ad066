import Foundation
import ParleyAudio
import Testing

@Suite("WAV files")
struct WAVAudioTests {
    static func parse(_ bytes: [UInt8]) -> Result<WAVAudio, WAVError> {
        bytes.withUnsafeBytes { raw in
            do throws(WAVError) { return .success(try WAVAudio(parsing: raw)) } catch { return .failure(error) }
        }
    }

    @Test func alsaRecordingsAreRead() throws {
        let audio = try WAVAudio(contentsOf: "/usr/share/sounds/alsa/Front_Center.wav")
        #expect(audio.sampleRate == 48_000 && audio.channels == 1 && audio.encoding == .pcm16)
        #expect(audio.duration > 1 && audio.duration < 2)
    }

    @Test(arguments: [(WAVAudio.Encoding.pcm16, 1), (.pcm16, 2), (.float32, 1), (.float32, 2)])
    func writtenFilesReadBackUnchanged(encoding: WAVAudio.Encoding, channels: Int) throws {
        var generator = SeededGenerator(seed: 5)
        // Values on the 16-bit grid, so 16-bit files can hold them exactly.
        let samples = (0..<2_000).map { _ in Float(Int16.random(in: .min ... .max, using: &generator)) / 32_768 }
        let audio = WAVAudio(sampleRate: 44_100, channels: channels, samples: samples, encoding: encoding)
        let parsed = try Self.parse(audio.serialized()).get()
        #expect(parsed == audio)
    }

    /// Anything but 16-bit PCM or 32-bit float, or more than two channels, is refused with
    /// a message that says what the file is and how to convert it.
    @Test func unsupportedFormatsAreExplained() {
        var header = WAVAudio(sampleRate: 48_000, samples: [0, 0]).serialized()
        header[34] = 24  // bits per sample
        header[32] = 3  // block align (keeps it consistent)
        let message = "\(Self.parse(header))"
        #expect(message.contains("24-bit integer PCM") && message.contains("sox"))
        var stereo = WAVAudio(sampleRate: 48_000, samples: [0, 0, 0]).serialized()
        stereo[22] = 3
        #expect("\(Self.parse(stereo))".contains("3 channels"))
        #expect("\(Self.parse(Array("RIFF0000WAVX".utf8)))".contains("not a WAV file"))
    }

    @Test func missingFileNamesTheFile() {
        #expect { _ = try WAVAudio(contentsOf: "/no/such/mic.wav") } throws: { "\($0)".contains("/no/such/mic.wav") }
    }

    /// Property: the parser survives any bytes. 10,000 random inputs, every truncation of a
    /// valid file, and 5,000 single-byte corruptions of it: each either parses or throws a
    /// WAVError; nothing crashes, and a truncated file never yields samples it did not hold.
    @Test func parserSurvivesAnyBytes() {
        var generator = SeededGenerator(seed: 77)
        for _ in 0..<10_000 {
            let length = Int.random(in: 0...200, using: &generator)
            var bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            if length >= 12, Bool.random(using: &generator) {
                bytes.replaceSubrange(0..<4, with: Array("RIFF".utf8))
                bytes.replaceSubrange(8..<12, with: Array("WAVE".utf8))
            }
            _ = Self.parse(bytes)
        }
        let valid = WAVAudio(sampleRate: 48_000, samples: (0..<64).map { Float($0) / 64 }).serialized()
        for cut in 0..<valid.count {
            if case .success(let audio) = Self.parse(Array(valid[..<cut])) {
                #expect(audio.samples.count <= (cut - 44) / 2)
            }
        }
        for _ in 0..<5_000 {
            var corrupted = valid
            corrupted[Int.random(in: 0..<corrupted.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            _ = Self.parse(corrupted)
        }
    }
}

@Suite("Resampler")
struct ResamplerTests {
    /// espeak-ng's rate to ours: a 1 kHz tone at 22,050 Hz becomes a 1 kHz tone at 48 kHz
    /// of the right length, within a sample of where it should be (the filter delay
    /// removed), and clean: fitting the ideal tone leaves a residual 50 dB down.
    @Test func toneKeepsItsFrequencyLengthAndTiming() throws {
        let input = (0..<22_050).map { Float(0.5 * sin(2 * Double.pi * 1_000 * Double($0) / 22_050)) }
        let output = try Resampler.resample(input, from: 22_050, to: 48_000)
        #expect(output.count == 48_000)
        let omega = 2 * Double.pi * 1_000 / 48_000
        var s = 0.0, c = 0.0
        let range = 1_000..<47_000
        for index in range {
            s += Double(output[index]) * sin(omega * Double(index))
            c += Double(output[index]) * cos(omega * Double(index))
        }
        let a = 2 * s / Double(range.count), b = 2 * c / Double(range.count)
        var residual = 0.0, power = 0.0
        for index in range {
            let fit = a * sin(omega * Double(index)) + b * cos(omega * Double(index))
            residual += (Double(output[index]) - fit) * (Double(output[index]) - fit)
            power += fit * fit
        }
        let snr = 10 * log10(power / residual)
        let offset = atan2(b, a) / omega  // samples by which the output leads the ideal tone
        print("22,050 → 48,000 Hz: amplitude \((a * a + b * b).squareRoot()), timing offset \(offset) samples (limit 1), residual \(-snr) dB (limit -50 dB)")
        #expect(snr > 50)
        #expect(abs(offset) < 1)
        #expect(abs((a * a + b * b).squareRoot() - 0.5) < 0.01)
    }

    @Test func invalidRatesAreRefused() {
        #expect(throws: Resampler.Error.self) { _ = try Resampler(inputRate: 0, outputRate: 48_000) }
        #expect(throws: Resampler.Error.self) { _ = try Resampler(inputRate: 48_000, outputRate: 48_000, quality: 11) }
    }
}
