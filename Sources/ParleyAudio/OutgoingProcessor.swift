/// The outgoing stream's voice processing, from raw capture to the frame handed to the
/// encoder: aligns the far-end reference by the playback→capture delay (measured or
/// given), passes it through the loudspeaker's model once one is found (a clipping
/// loudspeaker), cancels echo, then suppresses residual echo and noise. When a model is
/// taken the reference changes, and for a few seconds two filters run (`EchoCanceller`'s
/// crossover): a new one on the new reference, the adapted one on the old.
///
/// ```
/// played (PlayedSignal) ── read at delay 0 ──▶ DelayEstimator ◀── raw capture
///        └── read at delay = estimate − margin ──▶ LoudspeakerIdentifier.shape ──┐
///                                          raw capture ──▶ EchoCanceller ─▶ cleaned frame
///                          LoudspeakerIdentifier.observe ◀── the filter's residual ┘
/// ```
///
/// The raw capture is read, never written: callers keep it for `--record-raw` or a
/// monitor. Owned by the capture thread, which calls `process` once per frame with the
/// frame it captured and the played signal: in a call, `EchoReferenceTap` (filled by the
/// playback thread, read here at the echo's delay); offline, the samples played over the
/// same interval, kept in a `ReferenceDelayLine`.
public final class OutgoingProcessor {
    /// How the reference is aligned.
    public enum Delay: Sendable, Equatable, CustomStringConvertible {
        /// A known playback→capture delay, in milliseconds.
        case fixed(milliseconds: Int)
        /// Estimated continuously from the signals (GCC-PHAT, `DelayEstimator`).
        case automatic

        public var description: String {
            switch self {
            case .fixed(let milliseconds): return "\(milliseconds) ms"
            case .automatic: return "auto"
            }
        }
    }

    public struct Configuration: Sendable {
        public var echoCanceller = EchoCanceller.Configuration()
        public var delay: Delay = .automatic
        public var delayEstimator = DelayEstimator.Configuration()
        /// The reference is aligned this much *earlier* than the estimated delay, so taps of
        /// the echo path just before its strongest one still fall inside the filter.
        public var marginMilliseconds = 5
        /// Look for a clipping loudspeaker and pass the reference through its model
        /// (`LoudspeakerIdentifier`); a linear loudspeaker is left alone.
        public var identifyLoudspeaker = true
        public init() {}
    }

    public enum Error: Swift.Error, CustomStringConvertible {
        case delayOutOfRange(milliseconds: Int, maximum: Int)
        case echoCanceller(EchoCanceller.Error)

        public var description: String {
            switch self {
            case .delayOutOfRange(let milliseconds, let maximum):
                return "a playback→capture delay of \(milliseconds) ms is outside 0–\(maximum) ms"
            case .echoCanceller(let error):
                return error.description
            }
        }
    }

    public let configuration: Configuration
    public let frameSamples: Int
    private let canceller: EchoCanceller
    private let estimator: DelayEstimator?
    /// Nil when echo is not cancelled or the identification is off.
    public let loudspeaker: LoudspeakerIdentifier?
    /// Keeps what the push form of `process` is handed, for reading at the echo's delay.
    private var delayLine: ReferenceDelayLine
    private var far: [Float]
    private var aligned: [Float]
    private var shaped: [Float]
    /// The reference through the loudspeaker's previous model, during a crossover.
    private var previousShaped: [Float]
    private var residual: [Float]
    /// The largest delay the reference can be read at.
    public let maximumDelaySamples: Int
    /// The delay currently applied to the reference, in samples.
    public private(set) var appliedDelaySamples: Int
    /// Times the canceller was reset because the alignment moved.
    public private(set) var realignments = 0

    public init(_ configuration: Configuration = Configuration()) throws(Error) {
        self.configuration = configuration
        do {
            canceller = try EchoCanceller(configuration.echoCanceller)
        } catch {
            throw .echoCanceller(error)
        }
        frameSamples = canceller.frameSamples
        let maximum = configuration.delayEstimator.maximumDelayMilliseconds
        switch configuration.delay {
        case .fixed(let milliseconds):
            guard (0...maximum).contains(milliseconds) else { throw .delayOutOfRange(milliseconds: milliseconds, maximum: maximum) }
            appliedDelaySamples = AudioClock.samples(milliseconds: max(0, milliseconds - configuration.marginMilliseconds))
            estimator = nil
        case .automatic:
            appliedDelaySamples = 0
            estimator = configuration.echoCanceller.cancelEcho ? DelayEstimator(configuration.delayEstimator) : nil
        }
        maximumDelaySamples = AudioClock.samples(milliseconds: maximum)
        delayLine = ReferenceDelayLine(maximumDelaySamples: maximumDelaySamples, frameSamples: frameSamples)
        far = [Float](repeating: 0, count: frameSamples)
        aligned = [Float](repeating: 0, count: frameSamples)
        shaped = [Float](repeating: 0, count: frameSamples)
        previousShaped = [Float](repeating: 0, count: frameSamples)
        residual = [Float](repeating: 0, count: frameSamples)
        let identify = configuration.identifyLoudspeaker && configuration.echoCanceller.cancelEcho
        loudspeaker = identify ? LoudspeakerIdentifier(frameSamples: frameSamples) : nil
        if case .fixed(let milliseconds) = configuration.delay {
            loudspeaker?.lagSamples = AudioClock.samples(milliseconds: milliseconds) - appliedDelaySamples
        }
    }

    /// The estimator's current belief, when the delay is automatic.
    public var estimatedDelay: DelayEstimator.Estimate? { estimator?.estimate }

    /// Samples into the stream at which the first delay estimate was published.
    public var firstEstimateAtSample: Int? { estimator?.firstEstimateAtSample }

    /// Processes one frame (`frameSamples` long). `played` is what went to the speaker over
    /// the same interval as `capture` was recorded. Returns true if the frame holds voice.
    @discardableResult
    public func process(
        capture: UnsafeBufferPointer<Float>, played: UnsafeBufferPointer<Float>, into output: UnsafeMutableBufferPointer<Float>
    ) -> Bool {
        delayLine.append(played)
        return process(capture: capture, played: delayLine, into: output)
    }

    /// Processes one frame (`frameSamples` long) against `played`, read at delay 0 for the
    /// delay estimator and at the applied delay for the canceller. Returns true if the frame
    /// holds voice.
    @discardableResult
    public func process(
        capture: UnsafeBufferPointer<Float>, played: some PlayedSignal, into output: UnsafeMutableBufferPointer<Float>
    ) -> Bool {
        if let estimator {
            let estimate = far.withUnsafeMutableBufferPointer { farBuffer in
                played.read(delay: 0, into: farBuffer)
                return estimator.process(far: UnsafeBufferPointer(farBuffer), capture: capture)
            }
            if let estimate { follow(estimate) }
        }
        return aligned.withUnsafeMutableBufferPointer { alignedBuffer in
            played.read(delay: appliedDelaySamples, into: alignedBuffer)
            guard let loudspeaker else {
                return canceller.process(capture: capture, reference: UnsafeBufferPointer(alignedBuffer), into: output)
            }
            return shaped.withUnsafeMutableBufferPointer { shapedBuffer in
                residual.withUnsafeMutableBufferPointer { residualBuffer in
                    previousShaped.withUnsafeMutableBufferPointer { previousBuffer in
                        // During a crossover the adapted filter is still given the reference
                        // through the previous model.
                        let crossing = canceller.crossingOver
                        loudspeaker.shape(
                            reference: UnsafeBufferPointer(alignedBuffer), into: shapedBuffer, previous: crossing ? previousBuffer : nil)
                        let voice = canceller.process(
                            capture: capture, reference: UnsafeBufferPointer(shapedBuffer), into: output, residual: residualBuffer,
                            previous: crossing ? UnsafeBufferPointer(previousBuffer) : nil)
                        let models = loudspeaker.changes.count
                        loudspeaker.observe(residual: UnsafeBufferPointer(residualBuffer), capture: capture)
                        // A new model changes the reference from the next frame on: a second
                        // filter adapts on it while the adapted one keeps cancelling.
                        if loudspeaker.changes.count != models { canceller.beginCrossover() }
                        return voice
                    }
                }
            }
        }
    }

    private func follow(_ estimate: DelayEstimator.Estimate) {
        let margin = AudioClock.samples(milliseconds: configuration.marginMilliseconds)
        let wanted = min(max(0, estimate.samples - margin), maximumDelaySamples)
        // The filter tolerates the echo's start anywhere from just after the reference
        // to a few margins later, so small moves of the estimate (two devices' clocks
        // drifting apart by 0.1 ms a second) are left to its adaptation; only a move
        // out of that window realigns the reference. Realigning resets the filter: it
        // modelled the echo at the old alignment, and starting over converges faster
        // than unlearning it.
        let offset = estimate.samples - appliedDelaySamples
        let tolerated = AudioClock.samples(milliseconds: 1)...(3 * margin)
        if wanted != appliedDelaySamples && !tolerated.contains(offset) {
            appliedDelaySamples = wanted
            canceller.resetFilter()
            loudspeaker?.restart()
            realignments += 1
        }
        loudspeaker?.lagSamples = estimate.samples - appliedDelaySamples
    }
}
