import CSpeexDSP

/// SpeexDSP's acoustic echo canceller followed by its preprocessor, at 48 kHz: the voice
/// processing of the outgoing stream.
///
/// `process` takes one frame of raw capture and the far-end reference *already aligned*
/// with it (what was handed to playback, delayed by the measured playback→capture delay;
/// see `OutgoingProcessor`), and writes the cleaned frame to a separate buffer: the
/// capture is never altered. Because the reference is aligned, this calls
/// `speex_echo_cancellation` directly rather than SpeexDSP's `echo_playback/echo_capture`
/// pair, whose internal buffering assumes the two streams are in lock step.
///
/// The preprocessor has the echo state attached, so after the linear filter it also
/// suppresses the residual echo (non-linear, from the filter's own estimate of what it
/// missed), removes stationary noise, optionally levels the voice (AGC) and reports voice
/// activity.
///
/// Owns both SpeexDSP states; not thread-safe (the capture thread owns it).
public final class EchoCanceller {
    public struct Configuration: Sendable {
        /// 10 or 20 ms frames. 20 ms (the Opus frame the capture thread encodes anyway)
        /// gives the filter twice the frequency resolution, so it converges deeper (1–2 dB
        /// more ERLE and better double talk on the echo benchmark's rooms), and costs 11 %
        /// less CPU than two 10 ms frames; the price is the preprocessor's overlap, one
        /// frame: 20 ms of latency instead of 10. With `cancelEcho` off only the
        /// preprocessor runs, and `forUse(cancellingEcho:)` picks 10 ms.
        public var frameDuration: OpusFrameDuration = .ms20
        /// Length of the adaptive filter: how much of the room's reverberation is
        /// modelled after the bulk delay has been removed. 200 ms covers half the
        /// reverberation time of a lively room (RT60 0.4 s), which the tests show gives
        /// 35+ dB; 150 ms left only 27 dB there.
        public var tailMilliseconds: Int = 200
        /// Cancel echo at all (off for headphones: only the preprocessor runs).
        public var cancelEcho = true
        /// Stationary noise suppression.
        public var denoise = true
        /// Maximum noise attenuation, dB (negative). This and the two echo limits below are
        /// SpeexDSP's own defaults: on the echo benchmark's scenarios deeper or milder limits
        /// moved double-talk PESQ-WB by a few hundredths at most, and the old deeper ones
        /// (−25 dB of noise, −45 dB of echo) cost it 0.1–0.3 (BENCHMARKS.md, echo cancellation).
        public var noiseSuppressionDecibels = -15
        /// Maximum attenuation of residual echo while only the far end talks, dB.
        public var echoSuppressionDecibels = -40
        /// Maximum attenuation of residual echo while the near end also talks, dB: kept mild
        /// so double talk is not chopped.
        public var echoSuppressionActiveDecibels = -15
        /// Automatic gain control.
        public var agc = false
        /// Voice activity detection (reported per frame).
        public var vad = true
        public init() {}

        /// The settings for a path that cancels echo (20 ms frames) or only suppresses noise
        /// (headphones, a file: 10 ms frames, so the preprocessor delays the voice by 10 ms
        /// instead of 20).
        public static func forUse(cancellingEcho: Bool) -> Configuration {
            var configuration = Configuration()
            configuration.cancelEcho = cancellingEcho
            if !cancellingEcho { configuration.frameDuration = .ms10 }
            return configuration
        }
    }

    public enum Error: Swift.Error, CustomStringConvertible {
        case invalidFrameDuration(OpusFrameDuration)
        case invalidTail(Int)
        case speex(String)

        public var description: String {
            switch self {
            case .invalidFrameDuration(let duration):
                return "the echo canceller runs on 10 or 20 ms frames, not \(duration)"
            case .invalidTail(let milliseconds):
                return "echo tail \(milliseconds) ms is outside 20–1000 ms (100–200 ms suits a room once the delay is measured)"
            case .speex(let what):
                return "SpeexDSP could not \(what)"
            }
        }
    }

    public let configuration: Configuration
    public let frameSamples: Int
    /// The adapted filter, and a second one that adapts on a changed reference during a
    /// crossover (`beginCrossover`); they trade places when it ends. Both are made here, so
    /// a crossover allocates nothing on the capture thread.
    private var echo: OpaquePointer?
    private var incoming: OpaquePointer?
    private let preprocess: OpaquePointer
    private var input: [Int16]
    private var reference: [Int16]
    private var output: [Int16]
    private var previousReference: [Int16]
    private var incomingOutput: [Int16]
    /// The filter whose output the preprocessor was last given (its residual estimate goes with it).
    private var attached: OpaquePointer?
    private var crossover: Crossover?

    public init(_ configuration: Configuration = Configuration()) throws(Error) {
        guard configuration.frameDuration == .ms10 || configuration.frameDuration == .ms20 else {
            throw .invalidFrameDuration(configuration.frameDuration)
        }
        guard (20...1_000).contains(configuration.tailMilliseconds) else { throw .invalidTail(configuration.tailMilliseconds) }
        self.configuration = configuration
        let frame = configuration.frameDuration.samples
        frameSamples = frame
        let rate = Int32(AudioClock.sampleRate)
        if configuration.cancelEcho {
            guard let echo = speex_echo_state_init(Int32(frame), Int32(AudioClock.samples(milliseconds: configuration.tailMilliseconds))) else {
                throw .speex("create the echo state")
            }
            guard let incoming = speex_echo_state_init(Int32(frame), Int32(AudioClock.samples(milliseconds: configuration.tailMilliseconds))) else {
                speex_echo_state_destroy(echo)
                throw .speex("create the echo state")
            }
            // Without this SpeexDSP assumes 8 kHz and adapts with the wrong time constants.
            _ = parley_speex_echo_set_int(echo, SPEEX_ECHO_SET_SAMPLING_RATE, rate)
            _ = parley_speex_echo_set_int(incoming, SPEEX_ECHO_SET_SAMPLING_RATE, rate)
            self.echo = echo
            self.incoming = incoming
        } else {
            echo = nil
            incoming = nil
        }
        guard let preprocess = speex_preprocess_state_init(Int32(frame), rate) else {
            if let echo { speex_echo_state_destroy(echo) }
            if let incoming { speex_echo_state_destroy(incoming) }
            throw .speex("create the preprocessor")
        }
        self.preprocess = preprocess
        input = [Int16](repeating: 0, count: frame)
        reference = [Int16](repeating: 0, count: frame)
        output = [Int16](repeating: 0, count: frame)
        previousReference = [Int16](repeating: 0, count: frame)
        incomingOutput = [Int16](repeating: 0, count: frame)
        if let echo { _ = parley_speex_preprocess_attach_echo(preprocess, echo) }
        attached = echo
        setPreprocess(SPEEX_PREPROCESS_SET_DENOISE, configuration.denoise ? 1 : 0)
        setPreprocess(SPEEX_PREPROCESS_SET_NOISE_SUPPRESS, Int32(configuration.noiseSuppressionDecibels))
        setPreprocess(SPEEX_PREPROCESS_SET_ECHO_SUPPRESS, Int32(configuration.echoSuppressionDecibels))
        setPreprocess(SPEEX_PREPROCESS_SET_ECHO_SUPPRESS_ACTIVE, Int32(configuration.echoSuppressionActiveDecibels))
        setPreprocess(SPEEX_PREPROCESS_SET_AGC, configuration.agc ? 1 : 0)
        // SPEEX_PREPROCESS_SET_VAD is left alone: setting it, even to 0, prints a warning on
        // stderr ("replaced by a hack"). The speech probability it would use is computed
        // either way, and `process` applies SpeexDSP's start/continue thresholds to it.
        // Dereverberation in SpeexDSP is a stub that does nothing useful; keep it off.
        setPreprocess(SPEEX_PREPROCESS_SET_DEREVERB, 0)
    }

    deinit {
        speex_preprocess_state_destroy(preprocess)
        if let echo { speex_echo_state_destroy(echo) }
        if let incoming { speex_echo_state_destroy(incoming) }
    }

    private func setPreprocess(_ request: Int32, _ value: Int32) {
        _ = parley_speex_preprocess_set_int(preprocess, request, value)
    }

    /// Cleans one frame. `capture` and `reference` are `frameSamples` long, −1…1;
    /// `output` receives the cleaned frame, and `residual`, when given, what the linear
    /// filter left before the preprocessor (what `LoudspeakerIdentifier` compares its
    /// candidates with; during a crossover, the incoming filter's). During a crossover,
    /// `previous` is the reference as the adapted filter knows it (before the change); a
    /// crossover ends early when it is not given. Returns true when the frame holds voice
    /// (always true with VAD off).
    @discardableResult
    public func process(
        capture: UnsafeBufferPointer<Float>, reference alignedReference: UnsafeBufferPointer<Float>,
        into cleaned: UnsafeMutableBufferPointer<Float>, residual: UnsafeMutableBufferPointer<Float>? = nil,
        previous: UnsafeBufferPointer<Float>? = nil
    ) -> Bool {
        precondition(capture.count == frameSamples && alignedReference.count == frameSamples && cleaned.count >= frameSamples)
        precondition(previous.map { $0.count == frameSamples } ?? true)
        if crossover != nil && previous == nil { endCrossover() }
        // SpeexDSP's interface is 16-bit even in its float build. The buffers are taken once
        // a frame: a class's arrays indexed in a loop pay an exclusivity check per sample.
        let frame = frameSamples
        input.withUnsafeMutableBufferPointer { inputBuffer in
            reference.withUnsafeMutableBufferPointer { referenceBuffer in
                output.withUnsafeMutableBufferPointer { outputBuffer in
                    for index in 0..<frame {
                        inputBuffer[index] = SampleConversion.int16(capture[index])
                        referenceBuffer[index] = SampleConversion.int16(alignedReference[index])
                    }
                    if let echo {
                        if let previous, crossover != nil {
                            crossOver(inputBuffer, previous: previous, reference: referenceBuffer, into: outputBuffer, residual: residual)
                        } else {
                            speex_echo_cancellation(echo, inputBuffer.baseAddress, referenceBuffer.baseAddress, outputBuffer.baseAddress)
                            if let residual {
                                for index in 0..<frame { residual[index] = SampleConversion.float(outputBuffer[index]) }
                            }
                        }
                    } else {
                        outputBuffer.baseAddress!.update(from: inputBuffer.baseAddress!, count: frame)
                        if let residual {
                            for index in 0..<frame { residual[index] = SampleConversion.float(outputBuffer[index]) }
                        }
                    }
                    _ = speex_preprocess_run(preprocess, outputBuffer.baseAddress)
                    for index in 0..<frame { cleaned[index] = SampleConversion.float(outputBuffer[index]) }
                }
            }
        }
        guard configuration.vad else { return true }
        var probability: Int32 = 0
        _ = parley_speex_preprocess_get_int(preprocess, SPEEX_PREPROCESS_GET_PROB, &probability)
        // Voice starts above 35 % and continues above 20 % (SpeexDSP's defaults), so a
        // word's quieter end is not cut off.
        inVoice = probability >= (inVoice ? 20 : 35)
        return inVoice
    }

    private var inVoice = false

    /// Forgets the adapted filter, as after the reference was moved by a new delay estimate:
    /// a filter adapted to the old alignment would otherwise cancel the wrong echo while it
    /// re-adapts. Ends a crossover (the incoming filter is forgotten too).
    public func resetFilter() {
        crossover = nil
        if let echo { speex_echo_state_reset(echo) }
        attach(echo)
    }

    // MARK: - Crossover

    /// Where the two filters stand in a crossover.
    private struct Crossover {
        /// Each filter's output energy, smoothed over about 0.2 s.
        var adaptedEnergy: Float = 0
        var incomingEnergy: Float = 0
        /// Frames in a row in which the incoming filter left clearly less than the adapted one.
        var incomingAhead = 0
        var frames = 0
    }

    /// The crossover's rules. The incoming filter takes over for good once it has left at
    /// most 1/`aheadRatio` (3 dB less) of the adapted one's energy for `aheadFrames` frames
    /// in a row (0.5 s), or after `longestFrames` (10 s) whatever the figures say: the
    /// caller changed the reference because the new one is right.
    static let aheadRatio: Float = 2
    static let aheadFrames = 25
    static let longestFrames = 500

    /// True while two filters run.
    public var crossingOver: Bool { crossover != nil }

    /// Starts a crossover after the reference changed (the loudspeaker's model was found):
    /// a second filter starts from nothing on the new reference while the adapted one keeps
    /// cancelling with the old (`process`'s `previous`), and each frame the preprocessor gets
    /// the output of whichever has lately left less. Carried over to a changed reference,
    /// SpeexDSP's filter leaves the echo only 1–7 dB down for a second or more, and one
    /// started afresh needs longer; meanwhile the old filter, imperfect as it is, still takes
    /// 18–20 dB off. A crossover already running restarts its incoming filter.
    public func beginCrossover() {
        guard let incoming else { return }
        speex_echo_state_reset(incoming)
        crossover = Crossover()
    }

    private func endCrossover() {
        crossover = nil
        swap(&echo, &incoming)
        attach(echo)
    }

    private func attach(_ state: OpaquePointer?) {
        guard let state, state != attached else { return }
        _ = parley_speex_preprocess_attach_echo(preprocess, state)
        attached = state
    }

    private func crossOver(
        _ inputBuffer: UnsafeMutableBufferPointer<Int16>, previous: UnsafeBufferPointer<Float>,
        reference referenceBuffer: UnsafeMutableBufferPointer<Int16>, into outputBuffer: UnsafeMutableBufferPointer<Int16>,
        residual: UnsafeMutableBufferPointer<Float>?
    ) {
        guard var state = crossover, let echo, let incoming else { return }
        let frame = frameSamples
        previousReference.withUnsafeMutableBufferPointer { previousBuffer in
            incomingOutput.withUnsafeMutableBufferPointer { incomingBuffer in
                for index in 0..<frame { previousBuffer[index] = SampleConversion.int16(previous[index]) }
                speex_echo_cancellation(echo, inputBuffer.baseAddress, previousBuffer.baseAddress, outputBuffer.baseAddress)
                speex_echo_cancellation(incoming, inputBuffer.baseAddress, referenceBuffer.baseAddress, incomingBuffer.baseAddress)
                var adapted: Float = 0
                var fresh: Float = 0
                for index in 0..<frame {
                    let a = SampleConversion.float(outputBuffer[index])
                    let b = SampleConversion.float(incomingBuffer[index])
                    adapted += a * a
                    fresh += b * b
                    residual?[index] = b
                }
                state.adaptedEnergy = 0.9 * state.adaptedEnergy + adapted
                state.incomingEnergy = 0.9 * state.incomingEnergy + fresh
                state.frames += 1
                if state.incomingEnergy * Self.aheadRatio < state.adaptedEnergy {
                    state.incomingAhead += 1
                } else if state.incomingEnergy > state.adaptedEnergy {
                    state.incomingAhead = 0
                }
                let useIncoming = state.incomingEnergy < state.adaptedEnergy
                if useIncoming { outputBuffer.baseAddress!.update(from: incomingBuffer.baseAddress!, count: frame) }
                attach(useIncoming ? incoming : echo)
            }
        }
        crossover = state
        if state.incomingAhead >= Self.aheadFrames || state.frames >= Self.longestFrames { endCrossover() }
    }
}
