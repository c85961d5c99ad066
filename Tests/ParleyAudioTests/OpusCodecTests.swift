import Foundation
import ParleyAudio
import Testing

@Suite("Opus codec")
struct OpusCodecTests {
    /// Recorded speech through 32 kb/s Opus and back is the same speech as a listener
    /// hears it: after removing the codec's look-ahead, its band-wise log-spectral envelope
    /// (`SpectralEnvelope`) correlates with the input's above 0.9. (The waveforms correlate
    /// less, about 0.87: at this bitrate SILK does not keep the phase of high bands, which
    /// the ear does not hear.)
    @Test(arguments: OpusFrameDuration.allCases)
    func speechSurvivesARoundTrip(duration: OpusFrameDuration) throws {
        let speech = try TestSpeech.recorded()
        var configuration = OpusEncoder.Configuration()
        configuration.frameDuration = duration
        let encoder = try OpusEncoder(configuration)
        let decoder = try OpusDecoder()
        let frame = encoder.frameSamples
        var decoded = [Float]()
        for index in 0..<(speech.count / frame) {
            let packet = try encoder.encode(Array(speech[index * frame..<(index + 1) * frame]))
            var out = [Float](repeating: 0, count: frame)
            let count = try packet.withUnsafeBytes { bytes in try out.withUnsafeMutableBufferPointer { try decoder.decode(bytes, into: $0) } }
            #expect(count == frame)
            decoded += out
        }
        let lookahead = encoder.lookahead
        let aligned = Array(decoded[lookahead...])
        let correlation = pearsonCorrelation(aligned, speech)
        let frames = SpectralEnvelope.activeFrames(speech, in: 0..<min(speech.count, aligned.count))
        let envelope = SpectralEnvelope.correlation(aligned, speech, frames: frames)
        print("\(duration) frames at 32 kb/s: envelope correlation \(envelope) (threshold 0.9), waveform correlation \(correlation), look-ahead \(lookahead) samples")
        #expect(envelope > 0.9)
    }

    /// Concealment fills exactly the duration asked; a duration libopus cannot produce is
    /// refused with a message rather than silently shortened.
    @Test func concealmentCoversAnExactDuration() throws {
        let decoder = try OpusDecoder()
        var out = [Float](repeating: 0, count: 5_760)
        for samples in [120, 480, 960, 2_880] {
            let count = try out.withUnsafeMutableBufferPointer { try decoder.conceal(samples: samples, into: $0) }
            #expect(count == samples)
        }
        #expect(throws: OpusError.self) { try out.withUnsafeMutableBufferPointer { try decoder.conceal(samples: 100, into: $0) } }
    }

    /// With DTX on, silence is sent as tiny packets (1–2 bytes) that need not be sent.
    @Test func dtxTurnsSilenceIntoTinyPackets() throws {
        var configuration = OpusEncoder.Configuration()
        configuration.dtx = true
        let encoder = try OpusEncoder(configuration)
        let silence = [Float](repeating: 0, count: 960)
        let sizes = try (0..<50).map { _ in try encoder.encode(silence).count }
        // libopus enters DTX after about 200 ms of silence and still sends one refresh
        // frame every 400 ms, so of the last 40 frames at least 35 are tiny.
        let tiny = sizes.suffix(40).filter { $0 <= 2 }.count
        print("DTX on 50 frames of silence: \(tiny) of the last 40 packets are 1–2 bytes; sizes \(sizes)")
        #expect(tiny >= 35)
        #expect(encoder.isInDTX)
    }

    /// Settings outside what libopus accepts are refused with a message naming the range.
    @Test func settingsOutOfRangeAreRefused() throws {
        let encoder = try OpusEncoder()
        #expect { try encoder.setBitrate(1_000) } throws: { "\($0)".contains("6,000–510,000") }
        #expect { try encoder.setComplexity(11) } throws: { "\($0)".contains("0–10") }
        #expect { try encoder.setExpectedLossPercent(101) } throws: { "\($0)".contains("0–100") }
        var stereo = OpusEncoder.Configuration()
        stereo.channels = 3
        #expect(throws: OpusError.self) { _ = try OpusEncoder(stereo) }
        #expect { _ = try encoder.encode([Float](repeating: 0, count: 100)) } throws: { "\($0)".contains("960") }
    }

    /// Stereo is available: a two-channel frame round-trips with both channels.
    @Test func stereoRoundTrips() throws {
        var configuration = OpusEncoder.Configuration()
        configuration.channels = 2
        configuration.bitrate = 64_000
        let encoder = try OpusEncoder(configuration)
        let decoder = try OpusDecoder(channels: 2)
        var last = [Float](repeating: 0, count: 1_920)
        for index in 0..<20 {
            let frame = (0..<960).flatMap { n -> [Float] in
                let t = Double(index * 960 + n) / 48_000
                return [Float(0.3 * sin(2 * Double.pi * 300 * t)), Float(0.3 * sin(2 * Double.pi * 500 * t))]
            }
            let packet = try encoder.encode(frame)
            _ = try packet.withUnsafeBytes { bytes in try last.withUnsafeMutableBufferPointer { try decoder.decode(bytes, into: $0) } }
        }
        let left = stride(from: 0, to: 1_920, by: 2).map { last[$0] }
        let right = stride(from: 1, to: 1_920, by: 2).map { last[$0] }
        #expect(left.map(abs).max()! > 0.2 && right.map(abs).max()! > 0.2)
        #expect(left != right)
    }

    /// Hostile payloads never crash the jitter buffer: random bytes are either rejected
    /// as invalid Opus (counted) or decoded; reads keep producing exact-size chunks.
    @Test func jitterBufferSurvivesRandomPayloads() throws {
        var generator = SeededGenerator(seed: 42)
        let buffer = try JitterBuffer()
        var chunk = [Float](repeating: 0, count: 480)
        for index in 0..<10_000 {
            let length = Int.random(in: 0...300, using: &generator)
            let payload = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            buffer.insert(
                payload: payload, sequenceNumber: UInt16.random(in: 0...UInt16.max, using: &generator),
                timestamp: UInt32.random(in: 0...UInt32.max, using: &generator), arrival: Double(index) * 0.002)
            if index % 5 == 0 { chunk.withUnsafeMutableBufferPointer { _ = buffer.read(into: $0, now: Double(index) * 0.002) } }
            #expect(chunk.count == 480)
        }
        let statistics = buffer.currentStatistics
        print("10,000 random payloads: \(statistics.invalid) invalid, \(statistics.received) accepted, \(statistics.restarts) restarts, \(statistics.late) late")
        #expect(chunk.allSatisfy { $0.isFinite && abs($0) <= 2 })
    }
}
