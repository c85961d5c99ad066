import Foundation
import ParleyAudio
import Testing

@Suite("Echo canceller settings and voice activity")
struct EchoCancellerTests {
    /// Voice activity follows speech: most frames of a recorded voice count as voice, and
    /// almost none of the quiet noise once the noise estimate has settled (the last 1.5 s
    /// of 3 s after the speech).
    @Test func voiceActivityFollowsSpeech() throws {
        let speech = try TestSpeech.recorded()
        var generator = SeededGenerator(seed: 3)
        let quiet = (0..<(3 * 48_000)).map { _ in generator.gaussian() * 0.0003 }
        let signal = speech + quiet
        let canceller = try EchoCanceller()
        let step = canceller.frameSamples
        var output = [Float](repeating: 0, count: step)
        let silence = [Float](repeating: 0, count: step)
        var decisions = [Bool]()
        for start in stride(from: 0, to: signal.count - step + 1, by: step) {
            let frame = Array(signal[start..<start + step])
            decisions.append(
                frame.withUnsafeBufferPointer { capture in
                    silence.withUnsafeBufferPointer { reference in
                        output.withUnsafeMutableBufferPointer { canceller.process(capture: capture, reference: reference, into: $0) }
                    }
                })
        }
        let speechFrames = speech.count / step
        // SpectralEnvelope's frames are 20 ms.
        let activeFrames = SpectralEnvelope.activeFrames(speech, in: 0..<speech.count).count * SpectralEnvelope.frame / step
        let voiceInSpeech = decisions[..<speechFrames].filter { $0 }.count
        let settledQuiet = decisions[(speechFrames + 1_500 * 48 / step)...]
        let voiceInQuiet = settledQuiet.filter { $0 }.count
        print("voice in \(voiceInSpeech) of \(speechFrames) speech frames (\(activeFrames) active), in \(voiceInQuiet) of \(settledQuiet.count) settled quiet ones")
        #expect(Double(voiceInSpeech) >= 0.6 * Double(activeFrames))
        #expect(voiceInQuiet <= settledQuiet.count / 10)
    }

    @Test func settingsOutsideWhatSpeexDSPSupportsAreRefused() {
        var configuration = EchoCanceller.Configuration()
        configuration.frameDuration = .ms40
        #expect { _ = try EchoCanceller(configuration) } throws: { "\($0)".contains("10 or 20 ms") }
        configuration.frameDuration = .ms20
        configuration.tailMilliseconds = 5
        #expect { _ = try EchoCanceller(configuration) } throws: { "\($0)".contains("20–1000 ms") }
        var outgoing = OutgoingProcessor.Configuration()
        outgoing.delay = .fixed(milliseconds: 900)
        #expect { _ = try OutgoingProcessor(outgoing) } throws: { "\($0)".contains("0–500 ms") }
    }
}

@Suite("Automatic gain control")
struct AutomaticGainControlTests {
    /// With AGC on, a distant talker (−40 dBFS) comes out at least 6 dB louder after 4 s
    /// (SpeexDSP raises its gain only while it hears speech, by at most 12 dB a second);
    /// with it off, the level is unchanged within 3 dB.
    @Test func agcLiftsAQuietTalker() throws {
        let speech = try TestSpeech.farTalker.get()
        let quiet = TestSpeech.normalized(speech, rmsDecibels: -40)
        func level(agc: Bool) throws -> Double {
            var configuration = EchoCanceller.Configuration()
            configuration.agc = agc
            configuration.cancelEcho = false
            let canceller = try EchoCanceller(configuration)
            let step = canceller.frameSamples
            var output = [Float](repeating: 0, count: quiet.count)
            let silence = [Float](repeating: 0, count: step)
            quiet.withUnsafeBufferPointer { input in
                silence.withUnsafeBufferPointer { reference in
                    output.withUnsafeMutableBufferPointer { out in
                        for start in stride(from: 0, to: input.count - step + 1, by: step) {
                            canceller.process(
                                capture: UnsafeBufferPointer(rebasing: input[start..<start + step]), reference: reference,
                                into: UnsafeMutableBufferPointer(rebasing: out[start..<start + step]))
                        }
                    }
                }
            }
            return energyRatioDecibels(output, quiet, in: 4 * 48_000..<quiet.count)
        }
        let with = try level(agc: true)
        let without = try level(agc: false)
        print("a −40 dBFS talker after 4 s: \(with) dB with AGC (threshold +6), \(without) dB without")
        #expect(with >= 6)
        #expect(abs(without) <= 3)
    }
}
