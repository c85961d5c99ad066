/// Finds the pitch period of the audio at a point: the lag at which the waveform best
/// matches itself, by normalised cross-correlation. Time-stretching removes or repeats
/// exactly that many samples, so the voice keeps its pitch.
///
/// Two passes keep it cheap enough for the playback thread: a coarse search over every
/// lag on the signal decimated to 4 kHz (a voice's fundamental lies far below 2 kHz), then
/// a search at the full 48 kHz rate within one coarse step of the coarse winner. Lags span
/// 2.5–15 ms (400 Hz down to 67 Hz: children's and deep voices alike). The scratch space
/// is allocated once.
struct PitchPeriodSearch {
    static let minimumLag = 120
    static let maximumLag = 720
    static let decimation = 12

    struct Match: Equatable {
        /// Samples per channel.
        var lag: Int
        /// Normalised cross-correlation at `lag`, −1…1 (1: the waveform repeats exactly).
        var correlation: Float
        /// Mean square of the compared window (first channel).
        var power: Float
    }

    enum Direction: Int {
        /// Compare the window with what follows it `lag` samples later (to remove a period).
        case forward = 1
        /// Compare the window with what came `lag` samples earlier (to repeat a period).
        case backward = -1
    }

    /// The longest window `search` compares, per channel.
    static let maximumWindow = 480

    private var coarse: [Float]

    init() {
        coarse = [Float](repeating: 0, count: (Self.maximumWindow + Self.maximumLag) / Self.decimation + 2)
    }

    /// Finds the lag in `lags` (within 120…720) at which `samples[anchor + i]` best matches
    /// `samples[anchor + i ± lag]` over `window` samples (at most `maximumWindow`), on the
    /// first of `channels` interleaved channels. Every index touched must lie in `samples`:
    /// `anchor − lags.upperBound` for `.backward`, `anchor + window + lags.upperBound` for `.forward`.
    mutating func search(
        _ samples: UnsafeBufferPointer<Float>, channels: Int, anchor: Int, window: Int,
        direction: Direction, lags: ClosedRange<Int>
    ) -> Match {
        let window = min(window, Self.maximumWindow)
        let lags = max(lags.lowerBound, Self.minimumLag)...min(lags.upperBound, Self.maximumLag)
        let sign = direction.rawValue
        @inline(__always) func sample(_ frame: Int) -> Float { samples[frame * channels] }

        // Coarse pass: average blocks of `decimation` samples (a crude low-pass that is
        // plenty for locating a period), then correlate every coarse lag.
        let step = Self.decimation
        let span = window + lags.upperBound
        let start = sign > 0 ? anchor : anchor - lags.upperBound
        let coarseCount = span / step
        for block in 0..<coarseCount {
            var sum: Float = 0
            let first = start + block * step
            for offset in 0..<step { sum += sample(first + offset) }
            coarse[block] = sum
        }
        let coarseWindow = max(1, window / step)
        let coarseAnchor = sign > 0 ? 0 : lags.upperBound / step
        var best = (lag: lags.lowerBound, score: -Float.infinity)
        coarse.withUnsafeBufferPointer { decimated in
            let lowest = (lags.lowerBound + step - 1) / step
            let highest = lags.upperBound / step
            guard lowest <= highest else { return }
            for coarseLag in lowest...highest {
                let other = coarseAnchor + sign * coarseLag
                guard other >= 0, other + coarseWindow <= coarseCount, coarseAnchor + coarseWindow <= coarseCount else { continue }
                let score = Self.normalizedCorrelation(decimated, coarseAnchor, other, count: coarseWindow, stride: 1)
                if score > best.score { best = (coarseLag * step, score) }
            }
        }

        // Fine pass at the full rate, one coarse step either side.
        let low = max(lags.lowerBound, best.lag - step + 1)
        let high = min(lags.upperBound, best.lag + step - 1)
        var match = Match(lag: best.lag, correlation: -1, power: 0)
        for lag in low...max(low, high) {
            let score = Self.normalizedCorrelation(samples, anchor * channels, (anchor + sign * lag) * channels, count: window, stride: channels)
            if score > match.correlation {
                match.lag = lag
                match.correlation = score
            }
        }
        var power: Float = 0
        for index in 0..<window {
            let value = sample(anchor + index)
            power += value * value
        }
        match.power = power / Float(max(1, window))
        return match
    }

    /// Σxy / √(Σx² Σy²) over `count` values `stride` apart from `first` and `second`;
    /// 0 when either is silent.
    static func normalizedCorrelation(
        _ samples: UnsafeBufferPointer<Float>, _ first: Int, _ second: Int, count: Int, stride: Int
    ) -> Float {
        var cross: Float = 0, energyFirst: Float = 0, energySecond: Float = 0
        var a = first, b = second
        for _ in 0..<count {
            let x = samples[a], y = samples[b]
            cross += x * y
            energyFirst += x * x
            energySecond += y * y
            a += stride
            b += stride
        }
        let denominator = (energyFirst * energySecond).squareRoot()
        return denominator > 1e-20 ? cross / denominator : 0
    }
}
