import CSpeexDSP

/// A SpeexDSP resampler (`speex_resampler_*`) for one mono stream.
///
/// Used at the edges to bring files and devices to 48 kHz (espeak-ng's 22,050 Hz speech,
/// a 44.1 kHz WAV), and inside the jitter buffer to play slightly faster or slower than
/// real time: SpeexDSP lets the ratio change while it runs and keeps its filter history,
/// so a change of a few hundred ppm is inaudible, with no click.
///
/// Owns its state; not thread-safe (one thread at a time).
public final class Resampler {
    public enum Error: Swift.Error, CustomStringConvertible {
        case invalidRates(input: Int, output: Int)
        case invalidQuality(Int)
        case speex(String)

        public var description: String {
            switch self {
            case .invalidRates(let input, let output):
                return "cannot resample \(input) Hz to \(output) Hz: both rates must be between 1 and 768,000 Hz"
            case .invalidQuality(let quality):
                return "resampler quality \(quality) is outside 0–10"
            case .speex(let message):
                return "SpeexDSP resampler: \(message)"
            }
        }
    }

    private let state: OpaquePointer
    public private(set) var inputRate: Int
    public private(set) var outputRate: Int

    /// - Parameter quality: 0 (fastest) to 10 (best); SpeexDSP's default for voice is 3,
    ///   desktop-quality is 5.
    public init(inputRate: Int, outputRate: Int, quality: Int = 5) throws(Error) {
        guard (1...768_000).contains(inputRate), (1...768_000).contains(outputRate) else {
            throw .invalidRates(input: inputRate, output: outputRate)
        }
        guard (0...10).contains(quality) else { throw .invalidQuality(quality) }
        var error: Int32 = 0
        guard let state = speex_resampler_init(1, UInt32(inputRate), UInt32(outputRate), Int32(quality), &error) else {
            throw .speex(String(cString: speex_resampler_strerror(error)))
        }
        self.state = state
        self.inputRate = inputRate
        self.outputRate = outputRate
    }

    deinit { speex_resampler_destroy(state) }

    /// Samples the filter holds back: an impulse at input sample 0 appears at output sample
    /// `outputLatency`.
    public var inputLatency: Int { Int(speex_resampler_get_input_latency(state)) }
    public var outputLatency: Int { Int(speex_resampler_get_output_latency(state)) }

    /// Changes the ratio as `input : output` (a fraction; SpeexDSP reduces it), keeping the
    /// filter history, so the stream continues without a discontinuity. The nominal rates
    /// stay as they were (they only choose the filter's cutoff).
    public func setRatio(input: Int, output: Int) {
        speex_resampler_set_rate_frac(state, UInt32(input), UInt32(output), UInt32(inputRate), UInt32(outputRate))
    }

    /// Resamples as much of `input` as fits into `output`; returns how many input samples
    /// were consumed and how many output samples written.
    @discardableResult
    public func process(
        _ input: UnsafeBufferPointer<Float>, into output: UnsafeMutableBufferPointer<Float>
    ) -> (consumed: Int, produced: Int) {
        var inputCount = UInt32(input.count)
        var outputCount = UInt32(output.count)
        guard let outBase = output.baseAddress else { return (0, 0) }
        speex_resampler_process_float(state, 0, input.baseAddress, &inputCount, outBase, &outputCount)
        return (Int(inputCount), Int(outputCount))
    }

    /// Resamples a whole signal, flushing the filter at the end so the output has
    /// `input.count × output / input` samples, aligned with the input (the filter delay
    /// removed). Offline, so the default quality is high (8: about 60 dB of image
    /// rejection, against 40 dB at the real-time default of 5).
    public static func resample(_ input: [Float], from inputRate: Int, to outputRate: Int, quality: Int = 8) throws(Error) -> [Float] {
        if inputRate == outputRate { return input }
        let resampler = try Resampler(inputRate: inputRate, outputRate: outputRate, quality: quality)
        let latency = resampler.inputLatency
        let expected = Int((Int64(input.count) * Int64(outputRate)) / Int64(inputRate))
        // Pad with the filter's latency so the last input samples come out, then drop the
        // same latency from the front of the output.
        let padded = input + [Float](repeating: 0, count: latency + 1)
        var output = [Float](repeating: 0, count: expected + resampler.outputLatency + 16)
        var consumed = 0
        var produced = 0
        padded.withUnsafeBufferPointer { inBuffer in
            output.withUnsafeMutableBufferPointer { outBuffer in
                while consumed < inBuffer.count, produced < outBuffer.count {
                    let step = resampler.process(
                        UnsafeBufferPointer(rebasing: inBuffer[consumed...]),
                        into: UnsafeMutableBufferPointer(rebasing: outBuffer[produced...]))
                    if step.consumed == 0 && step.produced == 0 { break }
                    consumed += step.consumed
                    produced += step.produced
                }
            }
        }
        let skip = resampler.outputLatency
        let end = min(produced, skip + expected)
        guard end > skip else { return [] }
        var result = Array(output[skip..<end])
        if result.count < expected { result += [Float](repeating: 0, count: expected - result.count) }
        return result
    }
}
