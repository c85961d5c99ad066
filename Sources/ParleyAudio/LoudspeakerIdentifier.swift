import Foundation

/// Finds the loudspeaker's model (`LoudspeakerModel`: a high-pass, then a limit) from the
/// signals of a call, and passes the echo canceller's reference through it.
///
/// Where the loudspeaker clips, the linear filter's residual holds the distortion
/// HP(far) − clip(HP(far)) as the room shaped it. Each candidate model c predicts the
/// residual the current model m leaves, D_c = m(far) − c(far); the loudspeaker's candidate
/// is the one whose prediction is most *coherent* with the residual over 300–4,000 Hz
/// (coherence does not care about the room's response), given the current reference (the
/// part of the residual the reference already explains linearly is removed first: partial
/// coherence). Two rules keep a linear room linear and the choice steady:
///
/// - **A linear control.** While the filter adapts, its misadjustment is largest where the
///   reference is loudest, so any fragment of the loudest samples looks coherent with the
///   residual. Each candidate is also scored with the reference itself on the same samples;
///   it is taken only when its coherence is `overControl` times its control's.
/// - **No going back, and a pause after a change.** Right after the reference changes, the
///   residual is mostly the change itself, so the model just left would look right: after a
///   change nothing is evaluated for `holdFrames` frames of far-end speech, and the model
///   just left is never taken again.
///
/// What makes it cheap enough for a call (the prototype it comes from,
/// Benchmarks/echo_clipping_online.py, transformed 268 candidates twice every frame):
/// - **Coarse to fine, on the same evaluations**: every high-pass with limits 3 dB apart;
///   once the best of those looks promising, every high-pass at 0.5 dB steps within ±1 dB
///   of the limit interpolated around it is run over the evaluations the coarse grid has
///   already had (the last `refineEvaluationsNeeded` are kept for this), then over new ones
///   until it has had that many, and the best is taken (or the coarse search goes on). A
///   far talker who speaks a third of the time gives few evaluations in a call's first
///   seconds; a fine search that waited for its own took the model 2 s later;
/// - **one evaluation a frame while searching**, each on the last two frames (40 ms,
///   overlapping by one); while resting, far fewer (below);
/// - **a folded transform**: the 40 ms segment is windowed and folded onto 512 points (the
///   spectrum at 94 Hz spacing, 39 bins in the band) instead of a 2,048-point transform, and
///   the candidate's prediction and its control share one complex transform;
/// - **resting**: after `restAfterEvaluations` evaluations in which nothing was worth
///   refining (a linear room, or a model that holds) it evaluates once per 64 active frames, still
///   ready for a change of playback volume.
///
/// Plain Swift, no clock: time is the frames it is given. Not thread-safe: the capture
/// thread owns it, inside `OutgoingProcessor`.
public final class LoudspeakerIdentifier {
    public struct Configuration: Sendable {
        /// Far-end level (dBFS, mean square of a frame) under which a frame is not evaluated.
        public var farActiveDecibels: Float = -45
        /// The linear filter must already remove this much of the microphone's energy (dB,
        /// smoothed over about 1 s) before its residual is compared: a filter that has barely
        /// started leaves a residual no model explains.
        public var linearGateDecibels: Float = 6
        /// Forgetting factor of the spectra per evaluation (0.98: about 50 evaluations, 1 s of far-end speech while searching).
        public var memory: Float = 0.98
        /// Coherence (less its estimation bias) a candidate needs to be taken.
        public var coherenceNeeded: Float = 0.15
        /// How many times its linear control's coherence a candidate needs.
        public var overControl: Float = 1.5
        /// Evaluations after a change (or the start) before the first coarse decision, and
        /// between coarse decisions (after a fine search that took nothing, the next one
        /// waits `refineEvaluationsNeeded / 2` more).
        public var firstDecisionAfter = 8
        public var decisionEvery = 1
        /// The best coarse candidate starts the fine search once its coherence and its ratio
        /// over its control reach these (lower than what a model needs: the loudspeaker's
        /// limit is usually between two coarse ones); the fine candidates are then evaluated
        /// this many times before the best of them is taken or the coarse search resumes.
        public var refineCoherence: Float = 0.075
        public var refineOverControl: Float = 1.35
        public var refineEvaluationsNeeded = 20
        /// Far-end frames after a change in which nothing is evaluated (2 s): the filter
        /// re-adapts to the new reference.
        public var holdFrames = 100
        /// Evaluations with nothing promising (no coarse candidate good enough to refine)
        /// after which the search rests: a linear room's search costs this many.
        public var restAfterEvaluations = 50
        /// Active frames per evaluation while searching (each evaluation covers the last two
        /// frames, so 1 overlaps them; 2 took the model 1–1.5 s later in the echo
        /// benchmark's rooms whose far talker pauses).
        public var searchStride = 1
        /// When the fine search starts, its candidates are first run over the evaluations
        /// already made since the last change (kept for this), so the coarse grid and the
        /// fine search share them instead of the fine search waiting for new ones.
        public var fineOnPastEvaluations = true
        /// At a realignment, forget the linear gate's energies too: they hold the residual
        /// of the filter the realignment reset, and kept the gate shut for a second or more.
        public var clearGateOnRestart = true
        /// Far-end frames held after a realignment. None: the filter starts afresh there
        /// and the linear gate (`linearGateDecibels`) already waits for it.
        public var restartHoldFrames = 0
        public init() {}
    }

    /// A model taken, for a report or a log.
    public struct Change: Sendable, Equatable {
        /// Frames processed before it was taken.
        public var atFrame: Int
        public var model: LoudspeakerModel
        /// Its partial coherence with the residual (bias removed) and that over its control's.
        public var coherence: Float
        public var overControl: Float
        /// The reference's gain from then on (`referenceGain`).
        public var referenceGain: Float
    }

    public let configuration: Configuration
    public let frameSamples: Int
    /// The model the reference is passed through, nil while the loudspeaker looks linear.
    public private(set) var model: LoudspeakerModel?
    /// Every model taken, in order (no going back keeps this short).
    public private(set) var changes: [Change] = []
    /// What the model's output is multiplied by before it goes to the filter: 1/β, where
    /// β is how much of the new reference the one it replaces holds (clip(HP(x)) = βx + a part
    /// uncorrelated with x), measured on the far end's last seconds while the search compared
    /// the candidate. A clipped reference is much quieter than the one it replaces (β 0.17
    /// for the benchmark's loudspeaker clipping at −20.5 dBFS), and SpeexDSP's filter,
    /// starting afresh on it in the crossover, converges more slowly and less deep on a
    /// quiet reference; brought back to the old one's share, it reaches 2–4 dB more
    /// (BENCHMARKS.md, echo cancellation). It stays for the rest of the call (the filter
    /// has it built in), and compounds over later changes.
    public private(set) var referenceGain: Float = 1
    /// The gain before the last change, with `previous`.
    private var previousGain: Float = 1
    /// Candidates transformed so far (what the search cost).
    public private(set) var candidateEvaluations = 0

    // Candidates: `coarseLimits` for every high-pass; then, around the best of those, every
    // high-pass with `fineOffsets` from its limit (interpolated between the coarse ones).
    static let coarseLimits: [Float] = stride(from: -36, through: -3, by: 3).map { Float($0) }
    static let fineOffsets: [Float] = [-1, -0.5, 0, 0.5, 1]
    private static let transformSize = 512
    private static let bandHertz: ClosedRange<Double> = 300...4_000

    private let segment: Int
    /// The reference's histories are a frame longer than a segment, so the segment compared
    /// with the residual's can end up to a frame earlier (`lagSamples`).
    private let historyLength: Int
    private let highPasses: UnsafeMutablePointer<HighPass>
    /// The last `historyLength` samples of the aligned reference through each candidate high-pass
    /// (index 0: none), one after the other.
    private let shaped: UnsafeMutableBufferPointer<Float>
    private let residualHistory: UnsafeMutableBufferPointer<Float>
    private let window: UnsafeMutableBufferPointer<Float>
    private let now: UnsafeMutableBufferPointer<Float>
    private let difference: UnsafeMutableBufferPointer<Float>
    private let control: UnsafeMutableBufferPointer<Float>
    /// One candidate's prediction and control spectra (re, im per bin, one after the other).
    private let prediction: UnsafeMutableBufferPointer<Float>
    private let foldReal: UnsafeMutableBufferPointer<Float>
    private let foldImaginary: UnsafeMutableBufferPointer<Float>
    private let fft = FFT(size: LoudspeakerIdentifier.transformSize)
    private let lowBin: Int
    private let bins: Int
    /// The residual's and the current reference's spectra of this evaluation, and their
    /// running (cross-)powers: re, im interleaved for the complex ones.
    private let residualSpectrum: UnsafeMutableBufferPointer<Float>
    private let referenceSpectrum: UnsafeMutableBufferPointer<Float>
    private let residualPower: UnsafeMutableBufferPointer<Double>
    private let referencePower: UnsafeMutableBufferPointer<Double>
    private let residualReference: UnsafeMutableBufferPointer<Double>
    /// Per candidate slot and bin, `statistics` floats: |D|², |F|², D·R*, D·M*, F·R*, F·M*
    /// (the complex ones as re, im), where F is the control.
    private static let statistics = 10
    ///
    /// Double, as the partial coherences need: the control and the reference are coherent to
    /// within 1e-6 in some bins, and in Float the part of the control the reference does not
    /// explain came out as rounding noise, its coherence 1e20.
    private let spectra: UnsafeMutableBufferPointer<Double>
    private let used: UnsafeMutableBufferPointer<Float>
    /// Per candidate slot: Σ c(far)·m(far) and Σ m(far)² over the segments compared (decayed
    /// like the spectra), for β (`referenceGain`).
    private let gainSums: UnsafeMutableBufferPointer<Double>
    private let slots: Int
    private let coarseSlots: Int
    /// The evaluations since the last change, newest last, up to `refineEvaluationsNeeded`
    /// of them: each one's segments (the reference through the current model and through
    /// every high-pass) and the spectra of its residual and reference, so that the fine search
    /// can be run over them when it starts (`fineOnPastEvaluations`).
    private let pastCapacity: Int
    private let pastSegments: UnsafeMutableBufferPointer<Float>
    private let pastSpectra: UnsafeMutableBufferPointer<Float>
    private var pastCount = 0
    private var pastNewest = -1
    /// While refining: the limit the fine candidates are centred on, and the evaluations
    /// they have had.
    private var fineCenter: Float?
    private var refineEvaluations = 0
    /// After a fine search that took nothing, the evaluation before which no other starts.
    private var refineAgainAfter = 0
    private var frameIndex = 0
    private var farActive = false
    private var micEnergy: Float = 1e-12
    private var residualEnergy: Float = 1e-12
    private var hold = 0
    private var activeFrames = 0
    private var evaluations = 0
    private var evaluationsSinceChange = 0
    private var previous: LoudspeakerModel?

    public init(frameSamples: Int, configuration: Configuration = Configuration()) {
        self.configuration = configuration
        self.frameSamples = frameSamples
        segment = 2 * frameSamples
        historyLength = segment + frameSamples
        let count = LoudspeakerModel.highPasses.count
        // Index 0 (no high-pass) is a copy; the filters are for the others.
        highPasses = .allocate(capacity: count - 1)
        for (index, hertz) in LoudspeakerModel.highPasses.dropFirst().enumerated() {
            (highPasses + index).initialize(to: HighPass(hertz: hertz!, sampleRate: AudioClock.sampleRate))
        }
        func zeros(_ count: Int) -> UnsafeMutableBufferPointer<Float> {
            let buffer = UnsafeMutableBufferPointer<Float>.allocate(capacity: count)
            buffer.initialize(repeating: 0)
            return buffer
        }
        shaped = zeros(count * historyLength)
        residualHistory = zeros(segment)
        window = zeros(segment)
        for index in 0..<segment {
            window[index] = Float(0.5 - 0.5 * cos(2 * Double.pi * Double(index) / Double(segment - 1)))
        }
        now = zeros(segment)
        difference = zeros(segment)
        control = zeros(segment)
        foldReal = zeros(Self.transformSize)
        foldImaginary = zeros(Self.transformSize)
        let spacing = Double(AudioClock.sampleRate) / Double(Self.transformSize)
        let band = (1..<Self.transformSize / 2).filter { Self.bandHertz.contains(Double($0) * spacing) }
        lowBin = band.first!
        bins = band.count
        residualSpectrum = zeros(2 * bins)
        referenceSpectrum = zeros(2 * bins)
        func doubles(_ count: Int) -> UnsafeMutableBufferPointer<Double> {
            let buffer = UnsafeMutableBufferPointer<Double>.allocate(capacity: count)
            buffer.initialize(repeating: 0)
            return buffer
        }
        residualPower = doubles(bins)
        referencePower = doubles(bins)
        residualReference = doubles(2 * bins)
        prediction = zeros(4 * bins)
        coarseSlots = count * Self.coarseLimits.count
        slots = coarseSlots + count * Self.fineOffsets.count
        spectra = doubles(slots * bins * Self.statistics)
        used = zeros(slots)
        gainSums = doubles(2 * slots)
        pastCapacity = configuration.fineOnPastEvaluations ? max(configuration.refineEvaluationsNeeded, 1) : 1
        pastSegments = zeros(pastCapacity * (count + 1) * segment)
        pastSpectra = zeros(pastCapacity * 4 * bins)
    }

    deinit {
        highPasses.deinitialize(count: LoudspeakerModel.highPasses.count - 1)
        highPasses.deallocate()
        for buffer in [shaped, residualHistory, window, now, difference, control, prediction, foldReal, foldImaginary, residualSpectrum,
                       referenceSpectrum, used, pastSegments, pastSpectra] {
            buffer.deallocate()
        }
        for buffer in [residualPower, referencePower, residualReference, spectra, gainSums] { buffer.deallocate() }
    }

    /// Passes one frame of the aligned reference through the current model into `output`
    /// (a copy while there is none), and keeps it for the search. `previous`, when given,
    /// receives the same frame through the model before the last change (what a filter
    /// adapted before it knows: `EchoCanceller.beginCrossover`).
    public func shape(
        reference: UnsafeBufferPointer<Float>, into output: UnsafeMutableBufferPointer<Float>,
        previous: UnsafeMutableBufferPointer<Float>? = nil
    ) {
        precondition(reference.count == frameSamples && output.count >= frameSamples)
        precondition(previous.map { $0.count >= frameSamples } ?? true)
        let frame = frameSamples
        var energy: Float = 0
        for index in 0..<frame { energy += reference[index] * reference[index] }
        farActive = 10 * log10(energy / Float(frame) + 1e-30) >= configuration.farActiveDecibels
        for which in 0..<LoudspeakerModel.highPasses.count {
            let history = shaped.baseAddress! + which * historyLength
            history.update(from: history + frame, count: historyLength - frame)
            if which == 0 {
                (history + historyLength - frame).update(from: reference.baseAddress!, count: frame)
            } else {
                highPasses[which - 1].filter(reference, into: history + historyLength - frame)
            }
        }
        pass(through: model, gain: referenceGain, into: output.baseAddress!)
        if let previous { pass(through: self.previous, gain: previousGain, into: previous.baseAddress!) }
    }

    /// The frame just kept, through `model` (a copy when nil), times `gain`.
    private func pass(through model: LoudspeakerModel?, gain: Float, into output: UnsafeMutablePointer<Float>) {
        let frame = frameSamples
        guard let model else {
            output.update(from: shaped.baseAddress! + historyLength - frame, count: frame)
            return
        }
        let history = shaped.baseAddress! + model.highPassIndex * historyLength + historyLength - frame
        let limit = model.limit
        for index in 0..<frame { output[index] = gain * min(max(history[index], -limit), limit) }
    }

    /// Takes the linear filter's residual for the frame just shaped (before any suppression)
    /// and the microphone's frame, and searches when it is time to.
    public func observe(residual: UnsafeBufferPointer<Float>, capture: UnsafeBufferPointer<Float>) {
        precondition(residual.count == frameSamples && capture.count == frameSamples)
        frameIndex += 1
        let frame = frameSamples
        residualHistory.baseAddress!.update(from: residualHistory.baseAddress! + frame, count: segment - frame)
        (residualHistory.baseAddress! + segment - frame).update(from: residual.baseAddress!, count: frame)
        var mic: Float = 0
        var left: Float = 0
        for index in 0..<frame {
            mic += capture[index] * capture[index]
            left += residual[index] * residual[index]
        }
        micEnergy = 0.98 * micEnergy + mic
        residualEnergy = 0.98 * residualEnergy + left
        guard farActive else { return }
        if hold > 0 {
            hold -= 1
            return
        }
        guard 10 * log10(micEnergy / residualEnergy) >= configuration.linearGateDecibels else { return }
        activeFrames += 1
        // `searchStride` frames per evaluation while searching, 64 (1.3 s of far-end speech) while resting.
        let stride = evaluationsSinceChange >= configuration.restAfterEvaluations ? 64 : configuration.searchStride
        guard activeFrames % stride == 0 else { return }
        evaluate()
    }

    /// How much later than the reference the echo's strongest tap reaches the microphone
    /// (the estimated delay less the applied one: the alignment's margin, or a short delay
    /// left unaligned), up to a frame. The segment of each candidate's prediction is taken
    /// that much earlier than the residual's: 40 ms segments 5–15 ms apart share too little
    /// of the distortion to find it (on the benchmark's 10 ms rooms, nothing was found).
    public var lagSamples = 0 {
        didSet { lagSamples = min(max(lagSamples, 0), frameSamples) }
    }

    /// The segment of the reference through high-pass `which` that the residual's last
    /// segment is compared with.
    private func referenceSegment(_ which: Int) -> UnsafeMutablePointer<Float> {
        shaped.baseAddress! + which * historyLength + historyLength - segment - lagSamples
    }

    /// Forgets what the search gathered, keeping the model: after the reference was
    /// realigned, the histories and the filter's residual no longer belong together.
    public func restart() {
        clearStatistics()
        hold = configuration.restartHoldFrames
        if configuration.clearGateOnRestart {
            micEnergy = 1e-12
            residualEnergy = 1e-12
        }
    }

    // MARK: - The search

    private func clearStatistics() {
        spectra.update(repeating: 0)
        used.update(repeating: 0)
        gainSums.update(repeating: 0)
        residualPower.update(repeating: 0)
        referencePower.update(repeating: 0)
        residualReference.update(repeating: 0)
        fineCenter = nil
        refineEvaluations = 0
        activeFrames = 0
        evaluations = 0
        pastCount = 0
        refineAgainAfter = 0
    }

    private func candidate(_ slot: Int) -> LoudspeakerModel? {
        let coarse = Self.coarseLimits.count
        if slot < coarseSlots {
            return LoudspeakerModel(highPassIndex: slot / coarse, limitDecibels: Self.coarseLimits[slot % coarse])
        }
        guard let fineCenter else { return nil }
        let fine = slot - coarseSlots
        let offsets = Self.fineOffsets.count
        return LoudspeakerModel(highPassIndex: fine / offsets, limitDecibels: fineCenter + Self.fineOffsets[fine % offsets])
    }

    private func evaluate() {
        evaluations += 1
        evaluationsSinceChange += 1
        let count = segment
        // The reference as the filter sees it now, `lagSamples` before the residual's segment.
        if let model {
            let history = referenceSegment(model.highPassIndex)
            let limit = model.limit
            for index in 0..<count { now[index] = min(max(history[index], -limit), limit) }
        } else {
            now.baseAddress!.update(from: referenceSegment(0), count: count)
        }
        transform(residualHistory.baseAddress!, now.baseAddress!, into: residualSpectrum.baseAddress!, referenceSpectrum.baseAddress!)
        let entry = keepEvaluation()
        let memory = Double(configuration.memory)
        for bin in 0..<bins {
            let (rRe, rIm) = (Double(residualSpectrum[2 * bin]), Double(residualSpectrum[2 * bin + 1]))
            let (mRe, mIm) = (Double(referenceSpectrum[2 * bin]), Double(referenceSpectrum[2 * bin + 1]))
            residualPower[bin] = memory * residualPower[bin] + rRe * rRe + rIm * rIm
            referencePower[bin] = memory * referencePower[bin] + mRe * mRe + mIm * mIm
            residualReference[2 * bin] = memory * residualReference[2 * bin] + rRe * mRe + rIm * mIm
            residualReference[2 * bin + 1] = memory * residualReference[2 * bin + 1] + rIm * mRe - rRe * mIm
        }
        for index in 0..<spectra.count { spectra[index] *= memory }
        for slot in 0..<slots { used[slot] *= configuration.memory }
        for index in 0..<gainSums.count { gainSums[index] *= memory }

        // One phase at a time: the coarse grid, or the fine candidates around its best.
        let phase = fineCenter == nil ? 0..<coarseSlots : coarseSlots..<slots
        for slot in phase {
            if let candidate = candidate(slot) { _ = accumulate(slot, candidate, past: entry) }
        }
        if fineCenter != nil {
            refineEvaluations += 1
            guard refineEvaluations >= configuration.refineEvaluationsNeeded else { return }
            decide(among: phase)
            endRefining()
            return
        }
        guard evaluations >= configuration.firstDecisionAfter, evaluations % configuration.decisionEvery == 0,
              evaluations >= refineAgainAfter
        else { return }
        var best: (slot: Int, coherence: Float, overControl: Float)?
        for slot in phase {
            let (coherence, overControl) = score(slot)
            if coherence > best?.coherence ?? 0 { best = (slot, coherence, overControl) }
        }
        guard let best, best.coherence >= configuration.refineCoherence, best.overControl >= configuration.refineOverControl
        else { return }
        evaluationsSinceChange = 0
        // The limit between the coarse ones: the vertex of the parabola through the best and
        // its two neighbours on the same high-pass, to the nearest 0.5 dB.
        let coarse = Self.coarseLimits.count
        let step = Self.coarseLimits[1] - Self.coarseLimits[0]
        var center = Self.coarseLimits[best.slot % coarse]
        if best.slot % coarse > 0, best.slot % coarse < coarse - 1 {
            let below = score(best.slot - 1).coherence
            let above = score(best.slot + 1).coherence
            let curvature = below - 2 * best.coherence + above
            if curvature < 0 { center += step * 0.5 * (below - above) / curvature }
        }
        fineCenter = (center * 2).rounded() / 2
        refineEvaluations = 0
        clearFine()
        guard configuration.fineOnPastEvaluations else { return }
        // The fine candidates over the evaluations already made (this one included), oldest
        // first, forgotten as they would have been had they been evaluated live.
        let fine = coarseSlots..<slots
        for age in stride(from: pastCount - 1, through: 0, by: -1) {
            let past = (pastNewest - age + pastCapacity) % pastCapacity
            forgetFine()
            for slot in fine {
                if let candidate = candidate(slot) { _ = accumulate(slot, candidate, past: past) }
            }
        }
        refineEvaluations = pastCount
        guard refineEvaluations >= configuration.refineEvaluationsNeeded else { return }
        decide(among: fine)
        endRefining()
    }

    /// One past evaluation's segments: the reference through the current model, then the
    /// reference through each high-pass.
    private func pastSegment(_ past: Int, _ part: Int) -> UnsafeMutablePointer<Float> {
        pastSegments.baseAddress! + (past * (LoudspeakerModel.highPasses.count + 1) + part) * segment
    }

    /// Keeps this evaluation's segments and spectra; returns where.
    private func keepEvaluation() -> Int {
        pastNewest = (pastNewest + 1) % pastCapacity
        pastCount = min(pastCount + 1, pastCapacity)
        pastSegment(pastNewest, 0).update(from: now.baseAddress!, count: segment)
        for which in 0..<LoudspeakerModel.highPasses.count {
            pastSegment(pastNewest, 1 + which).update(from: referenceSegment(which), count: segment)
        }
        let spectraBase = pastSpectra.baseAddress! + pastNewest * 4 * bins
        spectraBase.update(from: residualSpectrum.baseAddress!, count: 2 * bins)
        (spectraBase + 2 * bins).update(from: referenceSpectrum.baseAddress!, count: 2 * bins)
        return pastNewest
    }

    /// The fine candidates' statistics forgotten by one evaluation.
    private func forgetFine() {
        let memory = Double(configuration.memory)
        let start = coarseSlots * bins * Self.statistics
        for index in start..<spectra.count { spectra[index] *= memory }
        for slot in coarseSlots..<slots { used[slot] *= configuration.memory }
        for index in 2 * coarseSlots..<gainSums.count { gainSums[index] *= memory }
    }

    private func clearFine() {
        spectra.baseAddress!.advanced(by: coarseSlots * bins * Self.statistics)
            .update(repeating: 0, count: (slots - coarseSlots) * bins * Self.statistics)
        for slot in coarseSlots..<slots { used[slot] = 0 }
        gainSums.baseAddress!.advanced(by: 2 * coarseSlots).update(repeating: 0, count: 2 * (slots - coarseSlots))
    }

    /// Ends a fine search. When it took nothing, the next one waits half a fine search's
    /// evaluations: each starts by running its candidates over the evaluations kept, and
    /// one every evaluation would cost eight times the coarse grid.
    private func endRefining() {
        if fineCenter != nil { refineAgainAfter = evaluations + configuration.refineEvaluationsNeeded / 2 }
        fineCenter = nil
        clearFine()
    }

    /// Takes the best of `candidates` if it explains the residual well enough, better than
    /// its control, and is neither the current model nor the one just left.
    private func decide(among candidates: Range<Int>) {
        var best: (slot: Int, coherence: Float, overControl: Float)?
        for slot in candidates {
            let (coherence, overControl) = score(slot)
            if coherence > best?.coherence ?? 0 { best = (slot, coherence, overControl) }
        }
        guard let best, let chosen = candidate(best.slot),
              best.coherence >= configuration.coherenceNeeded, best.overControl >= configuration.overControl,
              chosen != model, chosen != previous
        else { return }
        // β: how much of the chosen model's output the reference the filter knows holds.
        let (cross, power) = (gainSums[2 * best.slot], gainSums[2 * best.slot + 1])
        let beta = cross > 0 && power > 0 ? Float(cross / power) : 1
        previous = model
        previousGain = referenceGain
        model = chosen
        referenceGain /= min(max(beta, 0.1), 1)
        changes.append(Change(
            atFrame: frameIndex, model: chosen, coherence: best.coherence, overControl: best.overControl, referenceGain: referenceGain))
        clearStatistics()
        hold = configuration.holdFrames
        evaluationsSinceChange = 0
    }

    /// Adds one candidate's prediction and control to its statistics; false when it predicts
    /// no difference from the current reference on this segment.
    private func accumulate(_ slot: Int, _ candidate: LoudspeakerModel, past: Int) -> Bool {
        let count = segment
        let history = pastSegment(past, 1 + candidate.highPassIndex)
        let now = pastSegment(past, 0)
        let residualSpectrum = pastSpectra.baseAddress! + past * 4 * bins
        let referenceSpectrum = residualSpectrum + 2 * bins
        let limit = candidate.limit
        // D = m(far) − c(far); the control is HP(far) where D is non-zero.
        var any = false
        var cross: Float = 0
        var power: Float = 0
        for index in 0..<count {
            let value = history[index]
            let shaped = min(max(value, -limit), limit)
            let delta = now[index] - shaped
            let support = abs(delta) > 1e-7
            difference[index] = delta
            control[index] = support ? value : 0
            any = any || support
            cross += shaped * now[index]
            power += now[index] * now[index]
        }
        gainSums[2 * slot] += Double(cross)
        gainSums[2 * slot + 1] += Double(power)
        guard any else { return false }
        candidateEvaluations += 1
        transform(difference.baseAddress!, control.baseAddress!, into: prediction.baseAddress!, prediction.baseAddress! + 2 * bins)
        let base = spectra.baseAddress! + slot * bins * Self.statistics
        for bin in 0..<bins {
            let (dRe, dIm) = (Double(prediction[2 * bin]), Double(prediction[2 * bin + 1]))
            let (fRe, fIm) = (Double(prediction[2 * bins + 2 * bin]), Double(prediction[2 * bins + 2 * bin + 1]))
            let (rRe, rIm) = (Double(residualSpectrum[2 * bin]), Double(residualSpectrum[2 * bin + 1]))
            let (mRe, mIm) = (Double(referenceSpectrum[2 * bin]), Double(referenceSpectrum[2 * bin + 1]))
            let entry = base + bin * Self.statistics
            entry[0] += dRe * dRe + dIm * dIm
            entry[1] += fRe * fRe + fIm * fIm
            // x·y* = (xRe·yRe + xIm·yIm) + i(xIm·yRe − xRe·yIm)
            entry[2] += dRe * rRe + dIm * rIm
            entry[3] += dIm * rRe - dRe * rIm
            entry[4] += dRe * mRe + dIm * mIm
            entry[5] += dIm * mRe - dRe * mIm
            entry[6] += fRe * rRe + fIm * rIm
            entry[7] += fIm * rRe - fRe * rIm
            entry[8] += fRe * mRe + fIm * mIm
            entry[9] += fIm * mRe - fRe * mIm
        }
        used[slot] += 1
        return true
    }

    /// The windowed spectra over the band of two real segments at once: `first` goes in as
    /// the real part and `second` as the imaginary part of one folded transform, and the two
    /// are separated by the transform's symmetry. Writes re, im per bin.
    private func transform(
        _ first: UnsafePointer<Float>, _ second: UnsafePointer<Float>,
        into firstSpectrum: UnsafeMutablePointer<Float>, _ secondSpectrum: UnsafeMutablePointer<Float>
    ) {
        let size = Self.transformSize
        foldReal.update(repeating: 0)
        foldImaginary.update(repeating: 0)
        var start = 0
        while start < segment {
            let run = min(size, segment - start)
            for index in 0..<run {
                let weight = window[start + index]
                foldReal[index] += weight * first[start + index]
                foldImaginary[index] += weight * second[start + index]
            }
            start += run
        }
        fft.transform(real: foldReal.baseAddress!, imaginary: foldImaginary.baseAddress!)
        for bin in 0..<bins {
            let k = lowBin + bin
            let (zRe, zIm) = (foldReal[k], foldImaginary[k])
            let (wRe, wIm) = (foldReal[size - k], foldImaginary[size - k])
            // X = (Z[k] + conj(Z[N−k])) / 2, Y = (Z[k] − conj(Z[N−k])) / 2i
            firstSpectrum[2 * bin] = (zRe + wRe) / 2
            firstSpectrum[2 * bin + 1] = (zIm - wIm) / 2
            secondSpectrum[2 * bin] = (zIm + wIm) / 2
            secondSpectrum[2 * bin + 1] = -(zRe - wRe) / 2
        }
    }

    /// A slot's partial coherence with the residual given the current reference, less its
    /// estimation bias, and that over its control's. Zero for a slot with too few segments.
    private func score(_ slot: Int) -> (coherence: Float, overControl: Float) {
        let frames = used[slot]
        guard frames >= 6 else { return (0, 0) }
        let base = spectra.baseAddress! + slot * bins * Self.statistics
        var candidateSum = 0.0
        var controlSum = 0.0
        for bin in 0..<bins {
            let mm = referencePower[bin] + 1e-30
            let (rmRe, rmIm) = (residualReference[2 * bin], residualReference[2 * bin + 1])
            let rr = max(residualPower[bin] - (rmRe * rmRe + rmIm * rmIm) / mm, 1e-30)
            let entry = base + bin * Self.statistics
            func partial(own: Double, crossRe: Double, crossIm: Double, withReferenceRe: Double, withReferenceIm: Double) -> Double {
                // (X·R* − X·M* · (R·M*)* / |M|²), the part of the cross-spectrum M does not explain.
                let givenRe = crossRe - (withReferenceRe * rmRe + withReferenceIm * rmIm) / mm
                let givenIm = crossIm - (withReferenceIm * rmRe - withReferenceRe * rmIm) / mm
                let alone = max(own - (withReferenceRe * withReferenceRe + withReferenceIm * withReferenceIm) / mm, 1e-30)
                return (givenRe * givenRe + givenIm * givenIm) / (alone * rr)
            }
            candidateSum += partial(own: entry[0], crossRe: entry[2], crossIm: entry[3], withReferenceRe: entry[4], withReferenceIm: entry[5])
            controlSum += partial(own: entry[1], crossRe: entry[6], crossIm: entry[7], withReferenceRe: entry[8], withReferenceIm: entry[9])
        }
        let coherence = Float(candidateSum / Double(bins)) - 2 / frames
        let control = Float(controlSum / Double(bins))
        return (coherence, coherence / max(control, 1e-9))
    }
}
