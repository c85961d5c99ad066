import Foundation
import ParleyAudio

/// What a listener got of a talker: the talker's sent signal set against one receiver's
/// recording of them (`--record-received`), window by window.
///
/// 1. **Alignment.** Both signals are described every 5 ms by their log energy in 8 bands
///    (100 Hz–8 kHz, 20 ms Hann frames). For each 400 ms window of the sent signal, the lag
///    (0 to `maximumDelay`) at which the received features correlate best is the window's
///    delay, refined between hops by a parabola through the peak. The search looks near the
///    previous window's lag first; the whole range is searched with up to 2 s of context
///    (a phrase, not a syllable, so a similar word nearby cannot win). Envelopes, not waveforms:
///    the codec keeps a voice's envelope but not its phase, and the jitter buffer's time
///    stretching bends the timeline by up to 3 %, so each window is aligned on its own.
///    A window whose best correlation stays under `matchThreshold` is *unmatched* (what
///    arrived there does not resemble what was said); it, and a window without speech, is
///    cut at the nearest matched window's lag. A lone window far from the lag both its
///    neighbours agree on is searched again near them (`isolatedOutliers`).
/// 2. **Delay.** With `offset` placing the sender's capture on the receiver's playback
///    timeline (both on CLOCK_MONOTONIC), a window's lag is its mouth-to-ear delay: from
///    the sample entering the sender's input to the same sample leaving the receiver's mix.
/// 3. **Quality.** The received audio is cut out at each window's lag into a signal aligned
///    with the sent one; `SpectralEnvelope.correlation` over the sent signal's active
///    frames scores it (1: the same syllables in the same bands at the same times).
///    Speech said before the listener's playback began (a listener who joined late) is
///    not judged: nobody there could have heard it.
/// 4. **Dropouts.** An active 20 ms frame is *dropped* when its received energy is more
///    than 20 dB under the sent energy (scaled by the median received/sent ratio, so the
///    codec's and mixer's gain do not count); a dropout is a run of two or more dropped
///    frames in a row: 40 ms of missing speech is audible as a gap.
public struct SpeechComparison: Sendable {
    public struct Window: Sendable {
        /// Where the window starts in the sent signal, samples.
        public var start: Int
        /// Mouth-to-ear delay, samples; nil when the window was silent or unmatched.
        public var delay: Double?
        /// The best feature correlation found.
        public var match: Double
    }

    public var windows: [Window]
    /// The received signal aligned sample for sample with the sent one (zeros where nothing
    /// was received), for further measures (PESQ, STOI).
    public var alignedReceived: [Float]
    /// `SpectralEnvelope.correlation` of the aligned received signal against the sent one.
    public var envelopeCorrelation: Double
    /// Active 20 ms frames of the sent signal, those dropped, and the dropouts they form.
    public var activeFrames: Int
    public var droppedFrames: Int
    public var dropouts: Int
    /// Windows with speech whose received audio did not match.
    public var unmatchedWindows: Int
    /// Where in the sent signal the listener's playback had begun (0 unless it joined after
    /// the talker began): the envelope and dropout figures judge only speech from there on.
    public var audibleFromSample: Int

    /// Delays of the matched windows in milliseconds, sorted.
    public var delaysMilliseconds: [Double] {
        windows.compactMap { $0.delay.map { $0 * 1_000 / Double(AudioClock.sampleRate) } }.sorted()
    }

    public func delayPercentile(_ fraction: Double) -> Double? {
        let sorted = delaysMilliseconds
        guard !sorted.isEmpty else { return nil }
        return sorted[min(sorted.count - 1, Int((fraction * Double(sorted.count - 1)).rounded()))]
    }

    public var droppedPercent: Double { activeFrames > 0 ? 100 * Double(droppedFrames) / Double(activeFrames) : 0 }

    static let hop = 240
    static let windowHops = 80
    static let contextHops = 400
    static let bandCount = 8
    public static let matchThreshold = 0.5
    /// A match this good near the last lag needs no wider search.
    static let confidentMatch = 0.8

    /// Compares `sent` with `received` (both 48 kHz mono). `offset`: the index in
    /// `received` where `sent[0]` would be with no delay at all (it may be negative).
    public static func compare(sent: [Float], received: [Float], offset: Int, maximumDelaySeconds: Double = 1.5) -> SpeechComparison {
        let hop = Self.hop
        let fft = FFT(size: SpectralEnvelope.fftSize)
        let sentHops = sent.count / hop
        let maximumLag = Int(maximumDelaySeconds * Double(AudioClock.sampleRate)) / hop
        let sentFeatures = features(sent, from: 0, hops: sentHops, fft: fft)
        let receivedFeatures = features(received, from: offset, hops: sentHops + maximumLag + contextHops, fft: fft)
        let active = Set(SpectralEnvelope.activeFrames(sent, in: 0..<(sent.count / SpectralEnvelope.frame * SpectralEnvelope.frame)))

        var windows: [Window] = []
        var aligned = [Float](repeating: 0, count: sent.count)
        var lastLag: Double = 0
        var unmatched = 0
        var start = 0
        while start < sentHops {
            let end = min(sentHops, start + windowHops)
            let firstFrame = start * hop / SpectralEnvelope.frame
            let lastFrame = (end * hop - 1) / SpectralEnvelope.frame
            let speechFrames = (firstFrame...lastFrame).filter(active.contains).count
            var window = Window(start: start * hop, delay: nil, match: 0)
            if speechFrames >= 4 {
                // Near the last window's lag (the delay moves slowly). Without one, or when the
                // match there is not convincing (a turn's first window after a long silence, a
                // stall that moved the delay), the whole range too, judged on up to 2 s from
                // here: one short window can resemble another word, a whole phrase cannot.
                var (lag, match) = (0.0, 0.0)
                let known = windows.contains { $0.delay != nil }
                if known {
                    let near = Int(lastLag.rounded())
                    (lag, match) = bestLag(sentFeatures, receivedFeatures, from: start, to: end, lags: max(0, near - 30)...min(maximumLag, near + 30))
                }
                // The lag found over `hops` of context from here (coarse, every lag), refined
                // on this window alone near it.
                func searched(context hops: Int) -> (Double, Double) {
                    let context = min(sentHops, start + hops)
                    let coarse = bestLag(sentFeatures, receivedFeatures, from: start, to: context, lags: 0...maximumLag)
                    let near = Int(coarse.0.rounded())
                    return bestLag(sentFeatures, receivedFeatures, from: start, to: end, lags: max(0, near - 4)...min(maximumLag, near + 4))
                }
                if !known || match < confidentMatch {
                    let refined = searched(context: contextHops)
                    if refined.1 > match { (lag, match) = refined }
                }
                if match < confidentMatch {
                    // A step in the delay inside that context (a stall, the buffer adding room
                    // for repairs) pulls the phrase's lag to the step's far side, further from
                    // this window's own lag than the refinement reaches: a turn that began at
                    // 95 ms and went on at 160 ms matched 0.08 there and 0.87 at its own lag.
                    // Shorter contexts, taken only on a convincing match.
                    for hops in [contextHops / 2, windowHops] {
                        let refined = searched(context: hops)
                        if refined.1 >= confidentMatch, refined.1 > match {
                            (lag, match) = refined
                            break
                        }
                    }
                }
                window.match = match
                if match >= matchThreshold {
                    lastLag = lag
                    window.delay = lag * Double(hop)
                } else {
                    unmatched += 1
                }
            }
            windows.append(window)
            start = end
        }

        // A lone window whose lag is far from its matched neighbours', which agree with each
        // other, matched something else (the first window of a call that started badly once
        // matched a second later, at 0.84): search it again near them, or leave it unmatched.
        for (index, neighbourLag) in isolatedOutliers(windows) {
            let start = windows[index].start / hop
            let end = min(sentHops, start + windowHops)
            let near = Int((neighbourLag / Double(hop)).rounded())
            let (lag, match) = bestLag(sentFeatures, receivedFeatures, from: start, to: end, lags: max(0, near - 30)...min(maximumLag, near + 30))
            if match >= matchThreshold {
                windows[index].delay = lag * Double(hop)
                windows[index].match = match
            } else {
                windows[index].delay = nil
                windows[index].match = match
                unmatched += 1
            }
        }

        // Cut the received audio at each window's lag; a window without one (silent, or
        // unmatched) takes the nearest window's that has one, so the onset of a turn is cut
        // at that turn's delay rather than at the last turn's.
        let known = windows.indices.filter { windows[$0].delay != nil }
        for (index, window) in windows.enumerated() {
            guard let nearest = known.min(by: { abs($0 - index) < abs($1 - index) || (abs($0 - index) == abs($1 - index) && $0 > $1) }),
                  let delay = windows[nearest].delay else { continue }
            let shift = offset + Int(delay.rounded())
            for position in window.start..<min(sent.count, window.start + windowHops * hop) {
                let source = position + shift
                if source >= 0 && source < received.count { aligned[position] = received[source] }
            }
        }

        // Speech said before the listener was playing (it joined later than the talker:
        // `offset` < 0) could not be heard by anyone there; it is not judged.
        let audibleFrom = max(0, -offset)
        let frames = active.sorted().filter { $0 * SpectralEnvelope.frame >= audibleFrom }
        let correlation = frames.isEmpty ? 0 : SpectralEnvelope.correlation(aligned, sent, frames: frames)
        let (dropped, dropouts) = countDropouts(sent: sent, aligned: aligned, frames: frames)
        return SpeechComparison(
            windows: windows, alignedReceived: aligned, envelopeCorrelation: correlation, activeFrames: frames.count,
            droppedFrames: dropped, dropouts: dropouts, unmatchedWindows: unmatched, audibleFromSample: audibleFrom)
    }

    /// How far (samples) a window's lag may stray from neighbours that agree before it counts
    /// as matching something else: more than the jitter buffer moves the delay in a window
    /// (3 % time-stretch), less than a delay spike, which its neighbours would share.
    static let outlierSamples = 0.2 * Double(AudioClock.sampleRate)
    static let agreementSamples = 0.1 * Double(AudioClock.sampleRate)

    /// Matched windows whose lag is more than `outlierSamples` from both matched neighbours
    /// (the previous and the next; for the first, the next two) while those agree within
    /// `agreementSamples`, each with the lag its neighbours agree on (their mean). A step in
    /// the delay (a spike, an underrun) moves every window after it, so its neighbours
    /// disagree and it is left alone.
    static func isolatedOutliers(_ windows: [Window]) -> [(index: Int, neighbourLag: Double)] {
        let matched = windows.indices.filter { windows[$0].delay != nil }
        var outliers: [(index: Int, neighbourLag: Double)] = []
        for (position, index) in matched.enumerated() {
            let neighbours: (Int, Int)
            if position > 0, position + 1 < matched.count {
                neighbours = (matched[position - 1], matched[position + 1])
            } else if position == 0, matched.count >= 3 {
                neighbours = (matched[1], matched[2])
            } else {
                continue
            }
            let (first, second, lag) = (windows[neighbours.0].delay!, windows[neighbours.1].delay!, windows[index].delay!)
            guard abs(first - second) <= agreementSamples, abs(first - lag) > outlierSamples, abs(second - lag) > outlierSamples else { continue }
            outliers.append((index, (first + second) / 2))
        }
        return outliers
    }

    /// Log band energies every hop, for frames centred at `from + hop·k` (zeros outside the signal).
    static func features(_ signal: [Float], from origin: Int, hops: Int, fft: FFT) -> [[Float]] {
        let size = SpectralEnvelope.fftSize
        let frame = SpectralEnvelope.frame
        let edges: [Int] = (0...bandCount).map { band in
            Int(100 * pow(80.0, Double(band) / Double(bandCount)) * Double(size) / Double(AudioClock.sampleRate))
        }
        let window = (0..<frame).map { Float(0.5 - 0.5 * cos(2 * Double.pi * Double($0) / Double(frame))) }
        var real = [Float](repeating: 0, count: size)
        var imaginary = [Float](repeating: 0, count: size)
        var result: [[Float]] = []
        result.reserveCapacity(hops)
        for k in 0..<hops {
            let first = origin + k * hop - frame / 2
            var energy: Float = 0
            for index in 0..<size {
                real[index] = 0
                imaginary[index] = 0
            }
            for index in 0..<frame {
                let position = first + index
                guard position >= 0, position < signal.count else { continue }
                let value = signal[position]
                energy += value * value
                real[index] = value * window[index]
            }
            guard energy > 0 else {
                result.append([Float](repeating: -100, count: bandCount))
                continue
            }
            fft.transform(real: &real, imaginary: &imaginary)
            result.append((0..<bandCount).map { band in
                var power: Float = 0
                for bin in edges[band]..<max(edges[band + 1], edges[band] + 1) {
                    power += real[bin] * real[bin] + imaginary[bin] * imaginary[bin]
                }
                return 10 * log10(max(power, 1e-10))
            })
        }
        return result
    }

    /// The lag (in hops, refined) where the received features match the sent window best.
    static func bestLag(_ sent: [[Float]], _ received: [[Float]], from start: Int, to end: Int, lags: ClosedRange<Int>) -> (Double, Double) {
        let count = end - start
        // The sent window, each band's mean removed.
        var a = [Float](repeating: 0, count: count * bandCount)
        for band in 0..<bandCount {
            var mean: Float = 0
            for k in 0..<count { mean += sent[start + k][band] }
            mean /= Float(count)
            for k in 0..<count { a[k * bandCount + band] = sent[start + k][band] - mean }
        }
        let aNorm = a.reduce(0) { $0 + $1 * $1 }
        guard aNorm > 0 else { return (0, 0) }
        var scores = [Double](repeating: -1, count: lags.count)
        var b = [Float](repeating: 0, count: count * bandCount)
        for lag in lags where start + lag + count <= received.count {
            for band in 0..<bandCount {
                var mean: Float = 0
                for k in 0..<count { mean += received[start + lag + k][band] }
                mean /= Float(count)
                for k in 0..<count { b[k * bandCount + band] = received[start + lag + k][band] - mean }
            }
            var dot: Float = 0, bNorm: Float = 0
            for index in 0..<a.count {
                dot += a[index] * b[index]
                bNorm += b[index] * b[index]
            }
            scores[lag - lags.lowerBound] = bNorm > 0 ? Double(dot / (aNorm * bNorm).squareRoot()) : 0
        }
        var best = 0
        for index in 1..<scores.count where scores[index] > scores[best] { best = index }
        var refined = Double(best + lags.lowerBound)
        if best > 0, best < scores.count - 1 {
            let (left, middle, right) = (scores[best - 1], scores[best], scores[best + 1])
            let curvature = left - 2 * middle + right
            if curvature < 0 { refined += max(-0.5, min(0.5, 0.5 * (left - right) / curvature)) }
        }
        return (refined, scores[best])
    }

    static func countDropouts(sent: [Float], aligned: [Float], frames: [Int]) -> (dropped: Int, dropouts: Int) {
        let frame = SpectralEnvelope.frame
        func energy(_ signal: [Float], _ index: Int) -> Double {
            var sum = 0.0
            for position in index * frame..<min(signal.count, (index + 1) * frame) { sum += Double(signal[position]) * Double(signal[position]) }
            return sum
        }
        let pairs = frames.map { (sent: energy(sent, $0), received: energy(aligned, $0)) }
        let ratios = pairs.filter { $0.sent > 0 && $0.received > 0 }.map { $0.received / $0.sent }.sorted()
        guard !ratios.isEmpty else { return (frames.count, frames.isEmpty ? 0 : 1) }
        let gain = ratios[ratios.count / 2]
        var dropped = 0, dropouts = 0, run = 0
        var previous: Int?
        for (index, pair) in zip(frames, pairs) {
            let isDropped = pair.received < pair.sent * gain * 0.01
            if previous.map({ $0 + 1 != index }) ?? false { run = 0 }
            if isDropped {
                dropped += 1
                run += 1
                if run == 2 { dropouts += 1 }
            } else {
                run = 0
            }
            previous = index
        }
        return (dropped, dropouts)
    }
}
