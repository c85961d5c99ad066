/// Changes how long the pending audio plays without changing its pitch, the way WebRTC's
/// NetEQ does: in voiced speech it removes or repeats whole pitch periods, cross-faded
/// over a period so the waveform never jumps; in quiet passages (pauses, breath, comfort
/// noise) it cuts or repeats longer stretches, where nobody hears it.
///
/// Why not a library: SoundTouch (the well-kept WSOLA library Debian ships) was measured
/// for this (`Benchmarks/soundtouch-latency`). It stretches by a continuous tempo and must
/// hold 46 ms of audio at its speech settings (78 ms by default, 25 ms at the shortest
/// windows that still span a low voice's period) for every sample it passes, stretched or
/// not; a playout whose whole delay on a clean path is 10–20 ms cannot pay that, and
/// needs to remove or add a period *now*, where the signal allows it, which a tempo
/// control does not offer. This keeps no audio of its own and adds no delay.
///
/// Works on a `PlayoutAudioBuffer`, only on samples not yet played; reads the history
/// behind them. No allocation after `init`.
struct TimeStretcher {
    /// Never counts as quiet above this mean square (−45 dBFS), however loud the background.
    var quietCeiling: Float = 3.2e-5
    /// Counts as quiet below this mean square (−80 dBFS), however silent the background.
    var quietFloor: Float = 1e-8
    /// A passage counts as quiet within this factor (9 dB) of the background noise.
    var quietAboveNoise: Float = 8
    /// A period is removed or repeated only where the waveform repeats at least this well.
    var voicedCorrelation: Float = 0.9
    /// The same at the `fast` pace, which trades some smoothness for speed.
    var fastCorrelation: Float = 0.5
    /// The most one operation removes at the `fast` pace (15 ms): faster, speech blurs.
    var fastMaximum = 720
    /// The same at the `catchUp` pace (30 ms), only while the audio plays later than the
    /// maximum delay: blurring a syllable costs less than a second of words that late.
    var catchUpCorrelation: Float = 0.3
    var catchUpMaximum = 1_440
    /// The most one operation cuts from a quiet passage (20 ms), and its cross-fade (5 ms).
    var quietMaximum = 960
    var quietCrossFade = 240
    /// Unhurried changes (`AcceleratePace.quietOnly`, `expand(quietOnly:)`) wait until the
    /// speaker has been quiet this long (100 ms): between phrases, not between two words,
    /// so the words of a phrase keep their timing. The history must hold this much.
    static let pause = 4_800
    private var search = PitchPeriodSearch()
    /// The background noise level: the lowest mean square of a 5 ms block seen lately,
    /// rising slowly so a quieter room is found again after a loud one.
    private(set) var noisePower: Float = 1e-6

    init() {}

    static let minimumPeriod = PitchPeriodSearch.minimumLag
    static let maximumPeriod = PitchPeriodSearch.maximumLag
    /// Pending audio `accelerate` needs to consider every period: two of the longest.
    static let accelerateNeeds = 2 * maximumPeriod
    static let block = 240

    enum Outcome: Equatable {
        /// Removed or added `samples` (per channel) in voiced speech.
        case voiced(samples: Int)
        /// Removed or added `samples` in a quiet passage.
        case quiet(samples: Int)
        /// The audio here does not allow it (unvoiced or changing sound, too little audio).
        case notPossible

        var samples: Int {
            switch self {
            case .voiced(let samples), .quiet(let samples): return samples
            case .notPossible: return 0
            }
        }
    }

    /// The mean square below which audio counts as quiet (a pause, breath, comfort noise).
    var quietPower: Float { min(quietCeiling, max(quietFloor, noisePower * quietAboveNoise)) }

    /// Shortens the pending audio by up to `maximum` samples per channel, starting at its
    /// beginning: where it is quiet, by as much of the quiet as there is (up to
    /// `quietMaximum`); where it is voiced and `pace` allows, by one pitch period (several,
    /// up to `fastMaximum`, at the `fast` pace; `catchUpMaximum` at the `catchUp` pace).
    mutating func accelerate(_ buffer: inout PlayoutAudioBuffer, maximum: Int, pace: AcceleratePace) -> Outcome {
        let pending = buffer.pending
        if pace == .quietOnly, !inPause(buffer) { return .notPossible }
        let quiet = quietLength(buffer, from: 0, upTo: min(pending, min(maximum, quietMaximum) + quietCrossFade))
        if quiet >= quietCrossFade + Self.block {
            // Cut inside the quiet stretch, fading from its start to the audio after the cut.
            let cut = min(maximum, quiet - quietCrossFade)
            Self.jumpForward(&buffer, offset: 0, by: cut, crossFade: quietCrossFade)
            return .quiet(samples: cut)
        }
        guard pace != .quietOnly, maximum >= Self.minimumPeriod else { return .notPossible }
        // Lags up to half the pending audio: the period is cross-faded with the next.
        let longest = min(Self.maximumPeriod, (pending - PitchPeriodSearch.maximumWindow / 2) / 2)
        guard longest >= Self.minimumPeriod else { return .notPossible }
        let window = min(PitchPeriodSearch.maximumWindow, pending - longest)
        let channels = buffer.channels
        let match = buffer.withSamples { samples, readIndex, _ in
            search.search(UnsafeBufferPointer(samples), channels: channels, anchor: readIndex, window: window, direction: .forward, lags: Self.minimumPeriod...longest)
        }
        let fast = pace == .fast || pace == .catchUp
        let threshold = pace == .catchUp ? catchUpCorrelation : fast ? fastCorrelation : voicedCorrelation
        guard match.correlation >= threshold else { return .notPossible }
        var cut = match.lag
        if fast {
            // Whole periods, as many as the budget and the audio allow.
            let most = pace == .catchUp ? catchUpMaximum : fastMaximum
            let periods = max(1, min(maximum, most, pending - match.lag) / match.lag)
            cut = periods * match.lag
        }
        guard cut <= maximum, match.lag + cut <= pending else { return .notPossible }
        Self.jumpForward(&buffer, offset: 0, by: cut, crossFade: match.lag)
        return .voiced(samples: cut)
    }

    /// Lengthens the pending audio by one pitch period, repeated at its beginning, where the
    /// speech is voiced (unless `quietOnly`); where the audio around the read position is
    /// quiet, by up to `quietMaximum` of it. Needs a period of history.
    mutating func expand(_ buffer: inout PlayoutAudioBuffer, quietMaximum: Int, quietOnly: Bool = false) -> Outcome {
        let pending = buffer.pending
        let window = min(PitchPeriodSearch.maximumWindow, pending)
        guard window >= Self.minimumPeriod, buffer.readIndex >= Self.maximumPeriod else { return .notPossible }
        if quietOnly, !inPause(buffer) { return .notPossible }
        let fade = min(quietCrossFade, pending)
        // Whole blocks, as `quietLength` measures them.
        let wanted = min(quietMaximum, self.quietMaximum) / Self.block * Self.block
        if wanted > 0, quietLength(buffer, from: -wanted, upTo: wanted + Self.block) >= wanted + Self.block {
            // Repeat the quiet just played, fading into the repeat.
            return Self.jumpBack(&buffer, offset: 0, by: wanted, crossFade: fade) ? .quiet(samples: wanted) : .notPossible
        }
        guard !quietOnly else { return .notPossible }
        let channels = buffer.channels
        let match = buffer.withSamples { samples, readIndex, _ in
            search.search(UnsafeBufferPointer(samples), channels: channels, anchor: readIndex, window: window, direction: .backward, lags: Self.minimumPeriod...Self.maximumPeriod)
        }
        guard match.correlation >= voicedCorrelation, match.lag <= pending else { return .notPossible }
        return Self.jumpBack(&buffer, offset: 0, by: match.lag, crossFade: match.lag) ? .voiced(samples: match.lag) : .notPossible
    }

    /// Lengthens the pending audio at its end by one pitch period (at least `minimum`
    /// samples, in whole periods), continuing the waveform as it was going, so the buffer
    /// can wait for a packet that is late without concealing one. Works on any sound, voiced
    /// or not (waiting is worth a little roughness), given a few pending samples to
    /// cross-fade and a period of history.
    mutating func extend(_ buffer: inout PlayoutAudioBuffer, minimum: Int) -> Outcome {
        let pending = buffer.pending
        let window = PitchPeriodSearch.maximumWindow
        guard pending >= 32, buffer.writeIndex - window - Self.maximumPeriod >= 0 else { return .notPossible }
        let channels = buffer.channels
        let match = buffer.withSamples { samples, _, writeIndex in
            search.search(UnsafeBufferPointer(samples), channels: channels, anchor: writeIndex - window, window: window, direction: .backward, lags: Self.minimumPeriod...Self.maximumPeriod)
        }
        let fade = min(match.lag, pending)
        let periods = max(1, (minimum + match.lag - 1) / match.lag)
        let added = periods * match.lag
        guard buffer.writeIndex - fade - added >= 0 else { return .notPossible }
        let quiet = match.power < quietPower
        return Self.jumpBack(&buffer, offset: pending - fade, by: added, crossFade: fade)
            ? (quiet ? .quiet(samples: added) : .voiced(samples: added)) : .notPossible
    }

    /// Whether the last `pause` samples played were quiet.
    private mutating func inPause(_ buffer: PlayoutAudioBuffer) -> Bool {
        quietLength(buffer, from: -Self.pause, upTo: Self.pause) >= Self.pause
    }

    /// How many samples from `start` (relative to the read position; negative reaches into
    /// the history) up to `limit` are quiet, in whole blocks of 5 ms. Also updates the
    /// background noise estimate.
    private mutating func quietLength(_ buffer: PlayoutAudioBuffer, from start: Int, upTo limit: Int) -> Int {
        let channels = buffer.channels
        let threshold = quietPower
        var length = 0
        var quietest = Float.infinity
        buffer.storage.withUnsafeBufferPointer { samples in
            let first = buffer.readIndex + start
            guard first >= 0 else { return }
            while length + Self.block <= limit, first + length + Self.block <= buffer.writeIndex {
                var power: Float = 0
                var index = (first + length) * channels
                for _ in 0..<Self.block {
                    power += samples[index] * samples[index]
                    index += channels
                }
                power /= Float(Self.block)
                quietest = min(quietest, power)
                guard power < threshold else { break }
                length += Self.block
            }
        }
        if quietest.isFinite {
            // Follow a quieter background at once, a louder one by 1 % a look (a few dB a second).
            noisePower = max(1e-12, min(quietest, noisePower * 1.01))
        }
        return length
    }

    // MARK: The two splices

    /// Skips `count` samples: from `offset` (into the pending audio) the output fades from
    /// the audio there to the audio `count` later, over `crossFade` samples, and continues
    /// from there. Needs `offset + crossFade + count` pending samples.
    static func jumpForward(_ buffer: inout PlayoutAudioBuffer, offset: Int, by count: Int, crossFade: Int) {
        precondition(offset + crossFade + count <= buffer.pending)
        let channels = buffer.channels
        buffer.withSamples { samples, readIndex, _ in
            let start = (readIndex + offset) * channels
            let jump = count * channels
            let length = Float(crossFade + 1)
            for frame in 0..<crossFade {
                let weight = Float(frame + 1) / length
                for channel in 0..<channels {
                    let index = start + frame * channels + channel
                    samples[index] += weight * (samples[index + jump] - samples[index])
                }
            }
        }
        buffer.remove(atPendingOffset: offset + crossFade, count: count)
    }

    /// Repeats `count` samples: from `offset` (into the pending audio) the output fades from
    /// the audio there to the audio `count` earlier, over `crossFade` samples, and continues
    /// from there, so everything after `offset + crossFade − count` plays again. Needs
    /// `offset + crossFade` pending samples and `count − offset` of history.
    static func jumpBack(_ buffer: inout PlayoutAudioBuffer, offset: Int, by count: Int, crossFade: Int) -> Bool {
        precondition(offset + crossFade <= buffer.pending && crossFade <= count)
        // The repeated audio goes into a gap after the cross-fade; it is copied before the
        // cross-fade overwrites the part of it that lies inside the fade.
        guard buffer.insertGap(atPendingOffset: offset + crossFade, count: count) else { return false }
        let channels = buffer.channels
        buffer.withSamples { samples, readIndex, _ in
            let fadeStart = (readIndex + offset) * channels
            let gapStart = fadeStart + crossFade * channels
            let back = count * channels
            // The gap holds the `count` samples that preceded it: those before the fade's end.
            for index in 0..<back {
                let source = gapStart - back + index
                // Samples from inside the fade are still in place; all others lie before it.
                samples[gapStart + index] = samples[source]
            }
            let length = Float(crossFade + 1)
            for frame in 0..<crossFade {
                let weight = Float(frame + 1) / length
                for channel in 0..<channels {
                    let index = fadeStart + frame * channels + channel
                    samples[index] += weight * (samples[index - back] - samples[index])
                }
            }
        }
        return true
    }
}
