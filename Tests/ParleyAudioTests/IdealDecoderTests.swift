import ParleyAudio
import Testing

/// The ceiling a listener's audio is judged against: perfect knowledge of which packets
/// arrived, no deadline.
@Suite("The ideal decoder")
struct IdealDecoderTests {
    @Test func aLostFrameIsRebuiltFromTheNextPacketWheneverItArrivedElseConcealed() {
        let arrived = [true, false, true, false, false, true, true, false]
        #expect(IdealDecoder.repairs(arrived: arrived, frames: 8) == [.decode, .fec, .decode, .conceal, .fec, .decode, .decode, .conceal])
        // Frames past the known fates arrived, so the last lost one can still be rebuilt.
        #expect(IdealDecoder.repairs(arrived: arrived, frames: 9).suffix(2) == [.fec, .decode])
        // A frame never sent (DTX) is silence, and cannot rebuild the lost one before it.
        let sent = [true, true, false, true, true, true, true, true]
        #expect(IdealDecoder.repairs(arrived: arrived, sent: sent, frames: 8) == [.decode, .conceal, .silence, .conceal, .fec, .decode, .decode, .conceal])
    }

    /// With RED, a lost frame whose copy came later is played from the copy; FEC from the
    /// next frame also comes from a copy of that frame, but only if its packet carried FEC.
    @Test func aLostFrameWithACopyPlaysTheCopyAndFECCanComeFromACopy() {
        let arrived = [true, false, false, false, true]
        let copied = [false, true, false, true, false]
        #expect(IdealDecoder.repairs(arrived: arrived, copied: copied, frames: 5) == [.decode, .redundancy, .fec, .redundancy, .decode])
        #expect(IdealDecoder.repairs(arrived: arrived, copied: copied, carriesFEC: [true, true, true, false, true], frames: 5)
            == [.decode, .redundancy, .conceal, .redundancy, .decode], "frame 3's packet carried no FEC for frame 2")
    }

    static func speech() throws -> [Float] {
        try TestSpeech.recorded("Front_Center") + TestSpeech.recorded("Rear_Right")
    }

    static var configuration: OpusEncoder.Configuration {
        var configuration = OpusEncoder.Configuration()
        configuration.bitrate = 32_000
        configuration.inbandFEC = true
        configuration.expectedLossPercent = 10
        return configuration
    }

    /// With nothing lost the output is the codec's: the same length as the input and in
    /// step with it (the encoder's look-ahead removed: the best match is within a quarter of
    /// a millisecond, where SILK's own filters leave it), and close to it.
    @Test func withNothingLostTheOutputIsTheInputInStepThroughTheCodec() throws {
        let speech = try Self.speech()
        let output = try IdealDecoder.run(signal: speech, arrived: [], configuration: Self.configuration)
        #expect(output.audio.count == speech.count)
        #expect(output.repairs.allSatisfy { $0 == .decode })
        /// The correlation of output[n] with speech[n + lag].
        func correlation(lag: Int) -> Double {
            var xy = 0.0, xx = 0.0, yy = 0.0
            for index in max(0, -lag)..<min(output.audio.count, speech.count - lag) {
                let x = Double(output.audio[index]), y = Double(speech[index + lag])
                xy += x * y
                xx += x * x
                yy += y * y
            }
            return xy / (xx * yy).squareRoot()
        }
        let best = (-48...48).map { (lag: $0, value: correlation(lag: $0)) }.max { $0.value < $1.value }!.lag
        #expect(abs(best) <= 12, "best match \(best) samples off")
        #expect(correlation(lag: best) > 0.9, "correlation \(correlation(lag: best))")
    }

    /// What a listener would notice: speech frames lost one at a time come back close to
    /// what was said (from the next packet's FEC); lost two at a time, the first of each
    /// pair is only guessed (concealed) and sounds further from it.
    @Test func framesRebuiltFromFECSoundCloserToTheSpeechThanConcealedOnes() throws {
        let speech = try Self.speech()
        let frames = speech.count / 960
        // Every fifth frame lost, alone; or together with the frame after it.
        let single = (0..<frames).map { $0 % 5 != 2 }
        let paired = (0..<frames).map { $0 % 5 != 2 && $0 % 5 != 3 }
        let rebuilt = try IdealDecoder.run(signal: speech, arrived: single, configuration: Self.configuration)
        let guessed = try IdealDecoder.run(signal: speech, arrived: paired, configuration: Self.configuration)
        #expect(rebuilt.count(.fec) == frames / 5)
        #expect(guessed.count(.conceal) == frames / 5 && guessed.count(.fec) == frames / 5)

        // The frames lost alone in the first case are the concealed ones in the second.
        func error(_ output: [Float]) -> Double {
            var error = 0.0, energy = 0.0
            for frame in 0..<frames where frame % 5 == 2 {
                for index in frame * 960..<(frame + 1) * 960 {
                    error += Double(output[index] - speech[index]) * Double(output[index] - speech[index])
                    energy += Double(speech[index]) * Double(speech[index])
                }
            }
            return error / energy
        }
        #expect(error(rebuilt.audio) < 0.7 * error(guessed.audio), "FEC \(error(rebuilt.audio)), PLC \(error(guessed.audio))")
    }
}
