import Foundation

/// Estimates the bulk delay from the samples handed to playback (the far end) to their
/// echo in the capture, so the echo canceller's reference can be aligned and its tail only
/// has to cover the room's reverberation.
///
/// Method: GCC-PHAT (generalised cross-correlation with phase transform, Knapp & Carter
/// 1976) on 8 kHz copies of both signals. Every `hop` the last ~1 s of the far end and the
/// last ~0.5 s of the microphone are transformed together, their cross-power spectrum is
/// added to a running average (forgetting factor `memory`),
/// and the average, whitened to unit magnitude in each bin of the speech band
/// (200–3,800 Hz), is transformed back: an echo path gives one sharp peak at its
/// strongest tap, whatever the talker. Whitening is why this, and not a plain
/// cross-correlation, is used: speech is strongly periodic (pitch) and coloured, so a plain
/// correlation has broad peaks and false ones at multiples of the pitch period; envelope
/// correlation is pitch-proof but smeared by reverberation by tens of milliseconds.
///
/// Search range: 0 to `maximumDelay` (500 ms by default: the largest sound-server plus
/// USB/Bluetooth buffering a call can live with). The estimate is accepted only when the
/// peak stands out (`minimumConfidence`, peak over the RMS of the correlation in the search
/// range) and, once one is published, only moves when a new value more than 2 ms away wins
/// `confirmations` updates in a row: it does not hop on a noisy update or in double talk.
/// Updates are skipped while the far end is silent (nothing to correlate).
///
/// Plain Swift, no clock: it measures time in the samples it is given. Not thread-safe:
/// the capture thread feeds it.
public final class DelayEstimator {
    public struct Configuration: Sendable {
        /// The largest delay searched.
        public var maximumDelayMilliseconds: Int = 500
        /// How often a new correlation is computed.
        public var hopMilliseconds: Int = 500
        /// Forgetting factor of the averaged cross-spectrum per hop (0.8 ≈ a 2.5 s memory).
        public var memory: Float = 0.8
        /// Peak-to-RMS ratio of the whitened correlation below which an update is ignored.
        public var minimumConfidence: Float = 8
        /// Consecutive agreeing updates needed to move a published estimate.
        public var confirmations: Int = 2
        /// Far-end RMS (full scale 1) below which the far end counts as silent.
        public var silenceThreshold: Float = 0.003
        public init() {}
    }

    /// What the estimator currently believes.
    public struct Estimate: Sendable, Equatable {
        /// Delay in samples at 48 kHz.
        public var samples: Int
        /// Peak-to-RMS ratio of the correlation that produced or last confirmed it.
        public var confidence: Float
        public var milliseconds: Double { AudioClock.milliseconds(samples: samples) }
    }

    public let configuration: Configuration
    /// The published estimate, nil until the first confident one.
    public private(set) var estimate: Estimate?
    /// Number of times the published estimate changed after the first.
    public private(set) var changes = 0
    /// Input samples (at 48 kHz) seen when the first estimate was published.
    public private(set) var firstEstimateAtSample: Int?

    private static let decimation = 6  // 48 kHz → 8 kHz
    private static let rate = AudioClock.sampleRate / decimation
    /// The far end's history, 1.024 s at 8 kHz: room for the microphone's block plus the
    /// largest delay searched before it.
    private let windowLength = 8_192
    /// The microphone's block: its last 0.512 s. Every echo in it of a far-end sample up
    /// to `maximumLag` earlier lies inside the far end's window, so the circular correlation
    /// of the two over `windowLength` points never wraps at the lags searched, and the
    /// transform is half the size (8,192 points instead of 16,384 for the two full windows
    /// zero-padded): the estimator's CPU is halved and each hop still sees every new sample.
    private let micBlockLength = 4_096
    private let fft = FFT(size: 8_192)
    private let maximumLag: Int
    private let hop: Int
    private let lowBin: Int
    private let highBin: Int

    // Decimated history (ring buffers of `windowLength`). The estimator owns all its
    // buffers as raw allocations (freed in deinit): the transforms run on them directly.
    private let farHistory: UnsafeMutableBufferPointer<Float>
    private let micHistory: UnsafeMutableBufferPointer<Float>
    private var writeIndex = 0
    private var filled = 0
    private var sinceHop = 0
    private var farEnergySinceHop: Double = 0
    private var samplesSeen = 0
    // Partial sums for the boxcar decimator.
    private var farAccumulator: Float = 0
    private var micAccumulator: Float = 0
    private var phase = 0

    // The averaged cross-spectrum, one block's spectrum (later the whitened correlation),
    // and the analysis windows.
    private let crossReal: UnsafeMutableBufferPointer<Float>
    private let crossImaginary: UnsafeMutableBufferPointer<Float>
    private let spectrumReal: UnsafeMutableBufferPointer<Float>
    private let spectrumImaginary: UnsafeMutableBufferPointer<Float>
    private let farWindow: UnsafeMutableBufferPointer<Float>
    private let micWindow: UnsafeMutableBufferPointer<Float>

    private var candidate: (lag: Int, count: Int)?

    public init(_ configuration: Configuration = Configuration()) {
        self.configuration = configuration
        maximumLag = min(configuration.maximumDelayMilliseconds * Self.rate / 1_000, windowLength - micBlockLength)
        hop = max(1, configuration.hopMilliseconds * Self.rate / 1_000)
        lowBin = 200 * fft.size / Self.rate
        highBin = 3_800 * fft.size / Self.rate
        func zeroed(_ count: Int) -> UnsafeMutableBufferPointer<Float> {
            let buffer = UnsafeMutableBufferPointer<Float>.allocate(capacity: count)
            buffer.initialize(repeating: 0)
            return buffer
        }
        farHistory = zeroed(windowLength)
        micHistory = zeroed(windowLength)
        crossReal = zeroed(fft.size)
        crossImaginary = zeroed(fft.size)
        spectrumReal = zeroed(fft.size)
        spectrumImaginary = zeroed(fft.size)
        // Tapered edges, so the blocks' ends add no spurious broadband energy: a Hann window
        // over the microphone's block, and over the far end's window one that is flat
        // except for 64 ms cosine ramps at both ends (a Hann there would weigh the far-end
        // samples that the longest delays correlate with next to nothing).
        farWindow = zeroed(windowLength)
        let ramp = 512
        for index in 0..<windowLength {
            let edge = min(index, windowLength - 1 - index)
            farWindow[index] = edge >= ramp ? 1 : 0.5 - 0.5 * cos(Float.pi * Float(edge) / Float(ramp))
        }
        micWindow = zeroed(micBlockLength)
        for index in 0..<micBlockLength { micWindow[index] = 0.5 - 0.5 * cos(2 * Float.pi * Float(index) / Float(micBlockLength)) }
    }

    deinit {
        for buffer in [farHistory, micHistory, crossReal, crossImaginary, spectrumReal, spectrumImaginary, farWindow, micWindow] {
            buffer.deallocate()
        }
    }

    /// Feeds `far` (what was handed to playback) and `capture` (the raw microphone) for the
    /// same stretch of time, equal lengths at 48 kHz. Returns the estimate after this block.
    @discardableResult
    public func process(far: UnsafeBufferPointer<Float>, capture: UnsafeBufferPointer<Float>) -> Estimate? {
        precondition(far.count == capture.count, "far and capture blocks must cover the same time")
        // Boxcar average then keep every sixth sample. The aliasing this lets through is the
        // same linear map on both signals, so it cannot move the correlation peak.
        let scale = 1 / Float(Self.decimation)
        for index in 0..<far.count {
            farAccumulator += far[index]
            micAccumulator += capture[index]
            phase += 1
            if phase == Self.decimation {
                let f = farAccumulator * scale
                farHistory[writeIndex] = f
                micHistory[writeIndex] = micAccumulator * scale
                farEnergySinceHop += Double(f * f)
                writeIndex = (writeIndex + 1) % windowLength
                filled = min(filled + 1, windowLength)
                sinceHop += 1
                farAccumulator = 0
                micAccumulator = 0
                phase = 0
                // Until the first estimate, look twice as often and from half a window on:
                // the canceller restarts when the reference is first aligned, so every
                // fraction of a second before then is convergence lost (0.5 s of far-end
                // speech finds a room's echo; a weak or long one waits for a confident peak).
                let searching = estimate == nil
                if sinceHop >= (searching ? hop / 2 : hop) {
                    let rms = (farEnergySinceHop / Double(sinceHop)).squareRoot()
                    sinceHop = 0
                    farEnergySinceHop = 0
                    if filled >= (searching ? windowLength / 2 : windowLength) && rms >= Double(configuration.silenceThreshold) { update() }
                }
            }
        }
        samplesSeen += far.count
        return estimate
    }

    /// Forgets everything (a new device or a restarted stream).
    public func reset() {
        for buffer in [farHistory, micHistory, crossReal, crossImaginary] {
            buffer.update(repeating: 0)
        }
        filled = 0
        sinceHop = 0
        farEnergySinceHop = 0
        estimate = nil
        candidate = nil
    }

    /// Adds the latest window's cross-spectrum to the average and returns the lag (at
    /// 8 kHz) of the whitened correlation's peak and its peak-to-RMS ratio.
    private func correlationPeak() -> (lag: Int, confidence: Float) {
        let n = fft.size
        let memory = configuration.memory
        // Oldest first, windowed; the microphone only in the window's last `micBlockLength`
        // samples. Both real signals go through one complex transform (far as the real part,
        // mic as the imaginary part) and are separated by symmetry: one FFT instead of two.
        let micStart = windowLength - micBlockLength
        for index in 0..<windowLength {
            let ring = (writeIndex + index) % windowLength
            spectrumReal[index] = farHistory[ring] * farWindow[index]
            spectrumImaginary[index] = index >= micStart ? micHistory[ring] * micWindow[index - micStart] : 0
        }
        fft.transform(real: spectrumReal.baseAddress!, imaginary: spectrumImaginary.baseAddress!)
        // Far[k] = (Z[k] + conj Z[N−k]) / 2 and Mic[k] = (Z[k] − conj Z[N−k]) / 2i, then
        // G ← memory·G + Mic·conj(Far): the inverse transform of G peaks at the lag by which
        // the microphone trails the far end.
        for k in 0..<n {
            let mirror = k == 0 ? 0 : n - k
            let zr = spectrumReal[k], zi = spectrumImaginary[k]
            let mr = spectrumReal[mirror], mi = spectrumImaginary[mirror]
            let farR = (zr + mr) * 0.5, farI = (zi - mi) * 0.5
            let micR = (zi + mi) * 0.5, micI = (mr - zr) * 0.5
            crossReal[k] = memory * crossReal[k] + (micR * farR + micI * farI)
            crossImaginary[k] = memory * crossImaginary[k] + (micI * farR - micR * farI)
        }
        // Phase transform over the speech band only (both halves of the spectrum, so the
        // result is real).
        for k in 0..<n {
            let bin = k <= n / 2 ? k : n - k
            let magnitude = (crossReal[k] * crossReal[k] + crossImaginary[k] * crossImaginary[k]).squareRoot()
            if bin >= lowBin && bin <= highBin && magnitude > 0 {
                spectrumReal[k] = crossReal[k] / magnitude
                spectrumImaginary[k] = crossImaginary[k] / magnitude
            } else {
                spectrumReal[k] = 0
                spectrumImaginary[k] = 0
            }
        }
        fft.transform(real: spectrumReal.baseAddress!, imaginary: spectrumImaginary.baseAddress!, inverse: true)
        var best = 0
        var peak: Float = -.infinity
        var sumSquares: Float = 0
        for lag in 0...maximumLag {
            let value = spectrumReal[lag]
            sumSquares += value * value
            if value > peak {
                peak = value
                best = lag
            }
        }
        let rms = (sumSquares / Float(maximumLag + 1)).squareRoot()
        return (best, rms > 0 ? peak / rms : 0)
    }

    private func update() {
        let (lag, confidence) = correlationPeak()
        guard confidence >= configuration.minimumConfidence else { return }
        let samples = lag * Self.decimation
        guard let current = estimate else {
            estimate = Estimate(samples: samples, confidence: confidence)
            firstEstimateAtSample = samplesSeen
            return
        }
        // Hysteresis: within 2 ms of the published value confirms it; anything else must
        // win `confirmations` updates in a row (within 1 ms of each other) to replace it.
        let tolerance = 2 * Self.rate / 1_000
        if abs(samples / Self.decimation - current.samples / Self.decimation) <= tolerance {
            estimate?.confidence = confidence
            candidate = nil
            return
        }
        if let pending = candidate, abs(pending.lag - lag) <= Self.rate / 1_000 {
            candidate = (lag, pending.count + 1)
        } else {
            candidate = (lag, 1)
        }
        if let pending = candidate, pending.count >= configuration.confirmations {
            estimate = Estimate(samples: pending.lag * Self.decimation, confidence: confidence)
            changes += 1
            candidate = nil
        }
    }
}
