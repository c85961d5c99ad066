import ParleyWire

/// The jitter buffer for one remote speaker: turns packets that arrive late, early, out of
/// order, twice or not at all into a steady stream of audio in exact playback-period
/// chunks.
///
/// - **Adaptive delay.** The target is a high quantile of recent arrival delay
///   (`ArrivalDelayTracker`), clamped to 20–400 ms and starting at 70 ms. Playback
///   speed follows the difference between the current and the target delay: up to ±3 %
///   by resampling (SpeexDSP, ratio changed smoothly), which absorbs sender/receiver
///   clock drift and moves the delay without dropping or repeating a frame. When the
///   buffer runs dry the decoder conceals and the delay grows by that much.
/// - **Order.** Packets are keyed by extended sequence number; a reordered packet that
///   arrives before its time is played. One that arrives after is counted late and dropped.
/// - **Loss.** When packet N is due and missing: if a redundant copy of N came in a later
///   packet (RFC 2198 RED), it plays; else if N+1 is here, N is rebuilt from N+1's in-band
///   FEC; otherwise Opus conceals N (PLC) for exactly N's duration.
/// - **DTX.** Timestamps that jump while sequence numbers stay consecutive are the
///   sender's silence (Opus DTX), not loss: the gap is filled with comfort noise and
///   counted as such, and the packet after it waits for its time (the arrival-delay
///   quantile) rather than playing on arrival.
///
/// Plain Swift with time passed in (seconds on the receiver's clock), so tests drive it
/// with packet traces. Not thread-safe: the network thread inserts and the playback thread
/// reads, so the call layer guards it with a lock (both calls are short and never block).
public final class JitterBuffer {
    public struct Configuration: Sendable {
        public var delay = ArrivalDelayTracker.Configuration()
        /// Largest speed change used to move the delay or absorb drift (0.03 = 3 %).
        public var maximumStretch = 0.03
        /// Speed change per second of delay error (0.6: 30 ms too late → 1.8 % faster), so
        /// an excess of delay decays with a time constant of about 1.7 s.
        public var stretchGain = 0.6
        /// Integral gain: how fast the clock-drift estimate follows a lasting error (per s²);
        /// with `stretchGain` the loop is overdamped, its slow mode settling in about 10 s.
        public var driftGain = 0.05
        /// Delay excess smaller than this is left alone.
        public var deadbandSeconds = 0.002
        /// Packets held at most; beyond, the oldest is dropped.
        public var capacity = 512
        /// After this long without audio (and not in DTX), the speaker counts as gone
        /// quiet: output is silence until packets resume, then the buffer refills.
        public var idleAfterSeconds = 0.25
        /// How long after a loss the target keeps room for FEC.
        public var lossMemorySeconds = 10.0
        public var channels = 1
        public init() {}
    }

    private struct StoredPacket {
        var payload: [UInt8]
        var timestamp: Int64
        var samples: Int
        /// A copy from a later packet's RED payload, not the frame's own packet.
        var isRedundant = false
    }

    private enum State { case buffering, playing }

    public let configuration: Configuration
    private let decoder: OpusDecoder
    private let resampler: Resampler
    private var tracker: ArrivalDelayTracker
    private var statistics = JitterBufferStatistics()

    private var packets: [Int64: StoredPacket] = [:]
    private var sequenceUnwrapper = SequenceNumberUnwrapper()
    private var timestampUnwrapper = RTPTimestampUnwrapper()
    private var playedRecently = [Int64](repeating: -1, count: 1_024)
    /// The highest sequence number played, rebuilt or concealed: anything at or below is late.
    private var highestPlayed: Int64?
    /// Set when the speaker went quiet: the next packet restarts the buffering.
    private var waitingForResume = false
    /// Set from the first packet after a quiet spell until it plays.
    private var resumedAfterQuiet = false

    private var state = State.buffering
    /// The sequence number to decode next.
    private var nextSequence: Int64?
    /// The timestamp `nextSequence` should carry if nothing unusual happened.
    private var expectedTimestamp: Int64?
    private var lastFrameSamples = 960
    private var lastWasDTX = false
    /// Concealment played since the buffer ran dry.
    private var dryRunSamples = 0
    /// The part of it counted as underrun (not the comfort noise of a known DTX stretch),
    /// until the next packet tells whether the sender was silent or its audio was late.
    private var dryRunUnderrunSamples = 0

    // Decoded audio waiting for the resampler, and the media time of its end.
    private var fifo: [Float]
    private var fifoRead = 0
    private var fifoWrite = 0
    private var fifoEndTimestamp: Double = 0
    private var scratch: [Float]
    private var ratioLevel = 0  // current speed level (see `ratioNumerator`)
    private var driftEstimate = 0.0
    private var lastReadTime = 0.0
    private var lastLossTime = -Double.infinity
    private var lastUnderrunTime = -Double.infinity
    /// The highest sequence number received in a packet of its own, and its timestamp.
    private var highestReceived: Int64?
    private var highestReceivedTimestamp: Int64 = 0
    /// How many frames back the sender's redundancy reaches (0: none seen lately), and when
    /// a redundant copy last came.
    private var redundancyDepth = 0
    private var lastRedundancyTime = -Double.infinity
    private var rate = 1.0

    public init(_ configuration: Configuration = Configuration()) throws {
        self.configuration = configuration
        decoder = try OpusDecoder(channels: configuration.channels)
        resampler = try Resampler(inputRate: AudioClock.sampleRate, outputRate: AudioClock.sampleRate, quality: 4)
        tracker = ArrivalDelayTracker(configuration.delay)
        resampler.setRatio(input: Self.ratioNumerator(level: 0), output: Int(Self.ratioDenominator))
        fifo = [Float](repeating: 0, count: 32_768)
        scratch = [Float](repeating: 0, count: OpusPacket.maximumSamples * configuration.channels)
        statistics.targetDelayMilliseconds = tracker.targetSeconds * 1_000
    }

    /// The counts and delays for the status line.
    public var currentStatistics: JitterBufferStatistics {
        var current = statistics
        current.unresolvedUnderrunSamples = dryRunUnderrunSamples
        return current
    }

    /// The delay the buffer aims for, in seconds: the arrival-delay quantile, but while
    /// the stream is losing packets (a loss in the last `lossMemorySeconds`) at least one
    /// frame more than the playout margin, so that packet N+1 is here when lost packet N is
    /// due and FEC can rebuild it instead of concealment guessing; and when the sender's
    /// redundant copies reach d frames back, d frames, so that the copies of a burst of up
    /// to d losses are here before the burst's first frame is due.
    public var targetDelay: Double {
        let quantile = tracker.targetSeconds
        guard lastReadTime - lastLossTime <= configuration.lossMemorySeconds else { return quantile }
        let depth = lastReadTime - lastRedundancyTime <= configuration.lossMemorySeconds ? redundancyDepth : 0
        let floor = Double(max(1, depth) * lastFrameSamples) / Double(AudioClock.sampleRate) + configuration.delay.marginSeconds + configuration.deadbandSeconds
        return min(configuration.delay.maximumSeconds, max(quantile, floor))
    }

    // MARK: Network side

    /// Accepts one packet's Opus payload with its RTP sequence number and timestamp,
    /// received at `arrival` (seconds, the same clock `read` is given).
    ///
    /// `isRedundant`: the payload is a redundant copy of an earlier frame from a later
    /// packet's RED payload, with the sequence number and timestamp its own packet had. It
    /// only fills a frame that is missing and not yet played; it arrives late by design, so
    /// it says nothing of the path's delay, and a copy not needed is dropped without being
    /// counted late or duplicate.
    public func insert(payload: UnsafeRawBufferPointer, sequenceNumber: UInt16, timestamp: UInt32, arrival: Double, isRedundant: Bool = false) {
        if isRedundant {
            insertRedundant(payload: payload, sequenceNumber: sequenceNumber, timestamp: timestamp)
            return
        }
        guard let samples = OpusDecoder.sampleCount(of: payload), samples <= OpusPacket.maximumSamples else {
            statistics.invalid += 1
            return
        }
        var sequence = sequenceUnwrapper.unwrap(sequenceNumber)
        let extendedTimestamp = timestampUnwrapper.unwrap(timestamp)
        if let next = nextSequence, abs(sequence - next) > 3_000 {
            // A jump this large is a restarted sender (new sequence space), not reordering.
            restart()
            sequence = sequenceUnwrapper.unwrap(sequenceNumber)
            _ = timestampUnwrapper.unwrap(timestamp)
            statistics.restarts += 1
        }
        if let highest = highestPlayed, sequence <= highest {
            if playedRecently[Int(sequence & 1_023)] == sequence {
                statistics.duplicates += 1
            } else {
                statistics.late += 1
                // A late packet still tells how late the network is running.
                tracker.record(arrival: arrival, mediaSeconds: Double(extendedTimestamp) / Double(AudioClock.sampleRate))
            }
            return
        }
        if let stored = packets[sequence], !stored.isRedundant {
            statistics.duplicates += 1
            return
        }
        tracker.record(arrival: arrival, mediaSeconds: Double(extendedTimestamp) / Double(AudioClock.sampleRate))
        statistics.received += 1
        if highestReceived.map({ sequence > $0 }) ?? true {
            highestReceived = sequence
            highestReceivedTimestamp = extendedTimestamp
        }
        packets[sequence] = StoredPacket(payload: Array(payload), timestamp: extendedTimestamp, samples: samples)
        if state == .buffering {
            if waitingForResume {
                // Resuming after a quiet spell: keep the expected sequence and timestamp (to
                // tell DTX from loss) but measure the delay from this packet.
                waitingForResume = false
                resumedAfterQuiet = true
                fifoEndTimestamp = Double(extendedTimestamp)
            } else if nextSequence.map({ sequence < $0 }) ?? true {
                // Not playing yet: start from the earliest packet seen.
                nextSequence = sequence
                expectedTimestamp = extendedTimestamp
                fifoEndTimestamp = Double(extendedTimestamp)
            }
        }
        if packets.count > configuration.capacity, let oldest = packets.keys.min() {
            packets[oldest] = nil
            statistics.overflowed += 1
            if let next = nextSequence, oldest <= next { nextSequence = oldest + 1 }
        }
    }

    public func insert(payload: [UInt8], sequenceNumber: UInt16, timestamp: UInt32, arrival: Double, isRedundant: Bool = false) {
        payload.withUnsafeBytes {
            insert(payload: $0, sequenceNumber: sequenceNumber, timestamp: timestamp, arrival: arrival, isRedundant: isRedundant)
        }
    }

    /// A redundant copy fills a hole between what is about to play and the newest packet
    /// received; anything else (played, present, before the stream began, far off) it
    /// leaves alone.
    private func insertRedundant(payload: UnsafeRawBufferPointer, sequenceNumber: UInt16, timestamp: UInt32) {
        guard let next = nextSequence, let highest = highestReceived,
              let samples = OpusDecoder.sampleCount(of: payload), samples <= OpusPacket.maximumSamples
        else { return }
        // Unwrapped near the newest packet without moving the unwrappers: a copy never
        // extends the stream.
        let sequence = highest + Int64(Int16(truncatingIfNeeded: sequenceNumber &- UInt16(truncatingIfNeeded: highest)))
        guard sequence < highest, highest - sequence <= Self.maximumRedundancyDepth else { return }
        // How far back the sender's copies reach, needed or not: the target makes room for it.
        if lastReadTime - lastRedundancyTime > configuration.lossMemorySeconds { redundancyDepth = 0 }
        redundancyDepth = max(redundancyDepth, Int(highest - sequence))
        lastRedundancyTime = lastReadTime
        guard sequence >= next, packets[sequence] == nil else { return }
        if let played = highestPlayed, sequence <= played { return }
        let extendedTimestamp = highestReceivedTimestamp
            + Int64(Int32(truncatingIfNeeded: timestamp &- UInt32(truncatingIfNeeded: highestReceivedTimestamp)))
        packets[sequence] = StoredPacket(payload: Array(payload), timestamp: extendedTimestamp, samples: samples, isRedundant: true)
    }

    /// Redundant copies from farther back than this many frames are ignored.
    static let maximumRedundancyDepth: Int64 = 16

    // MARK: Playback side

    /// Fills `output` (one playback period, interleaved) with the next audio at time `now`.
    /// Returns false when it wrote silence because the speaker is not sending (before the
    /// first packet, while refilling, or after they went quiet).
    @discardableResult
    public func read(into output: UnsafeMutableBufferPointer<Float>, now: Double) -> Bool {
        lastReadTime = now
        let delay = currentDelay(now: now)
        let target = targetDelay
        statistics.targetDelayMilliseconds = target * 1_000
        statistics.currentDelayMilliseconds = (delay ?? 0) * 1_000
        if state == .buffering {
            guard let delay, delay >= target else {
                fill(output, from: 0)
                return false
            }
            state = .playing
        }
        adjustRate(delay: delay ?? target, target: target)
        let channels = configuration.channels
        var written = 0
        while written < output.count {
            let wanted = (output.count - written) / channels
            let needed = Int((Double(wanted) * rate).rounded(.up)) + resampler.inputLatency + 8
            while (fifoWrite - fifoRead) / channels < needed {
                guard decodeNextFrame() else {
                    // The speaker went quiet: play out what is decoded, then silence until
                    // packets come back and the buffer has refilled.
                    state = .buffering
                    waitingForResume = true
                    fill(output, from: written)
                    fifoRead = fifoWrite
                    return written > 0
                }
            }
            let produced = fifo.withUnsafeBufferPointer { fifoBuffer in
                resampler.process(
                    UnsafeBufferPointer(rebasing: fifoBuffer[fifoRead..<fifoWrite]),
                    into: UnsafeMutableBufferPointer(rebasing: output[written...]))
            }
            fifoRead += produced.consumed
            written += produced.produced
            if produced.produced == 0 && produced.consumed == 0 { break }
        }
        if written < output.count { fill(output, from: written) }
        return true
    }

    /// Convenience for tests and tools: reads one chunk of `samples` into a new array.
    public func read(samples: Int, now: Double) -> [Float] {
        var chunk = [Float](repeating: 0, count: samples * configuration.channels)
        chunk.withUnsafeMutableBufferPointer { _ = read(into: $0, now: now) }
        return chunk
    }

    // MARK: Internals

    /// Delay of the sample about to play behind the earliest possible arrival, in seconds.
    private func currentDelay(now: Double) -> Double? {
        guard nextSequence != nil else { return nil }
        return delay(afterPendingAudioPlaying: fifoEndTimestamp, now: now)
    }

    /// The delay behind the earliest possible arrival, in seconds, of the sample with media
    /// time `timestamp` if it played right after the audio already decoded.
    private func delay(afterPendingAudioPlaying timestamp: Double, now: Double) -> Double? {
        guard let minimum = tracker.minimumTransit else { return nil }
        let pending = Double((fifoWrite - fifoRead) / configuration.channels + resampler.inputLatency)
        return now - ((timestamp - pending) / Double(AudioClock.sampleRate) + minimum)
    }

    /// Sets the playback speed from the delay error with a proportional-integral law.
    ///
    /// The proportional part moves the delay towards the target (3 % at most, a glide of
    /// pitch nobody notices in speech); the integral part learns the steady speed
    /// difference between the sender's and our clock (±500 ppm for cheap sound cards), so
    /// the delay settles on the target instead of sagging below it until the buffer runs
    /// dry. Below the target the law acts at once (running dry is audible); above it, only
    /// past a small deadband. The integral learns only near the target and not just after
    /// the buffer ran dry (a jitter change, the start, the jump an underrun causes are not
    /// drift), and is bounded to ±1,000 ppm.
    private func adjustRate(delay: Double, target: Double) {
        let error = delay - target
        let effective = error < 0 ? error : max(0, error - configuration.deadbandSeconds)
        let period = Double(AudioClock.samples(milliseconds: 10)) / Double(AudioClock.sampleRate)
        if abs(error) < 0.003 && lastReadTime - lastUnderrunTime > 2 {
            driftEstimate += configuration.driftGain * effective * period
            driftEstimate = max(-0.001, min(0.001, driftEstimate))
        }
        let wanted = 1 + max(-configuration.maximumStretch, min(configuration.maximumStretch, effective * configuration.stretchGain + driftEstimate))
        // SpeexDSP takes the ratio as a fraction: levels 50 ppm apart, at most ten levels per
        // chunk so the pitch glides, and the filter is rebuilt only when the level changes.
        let level = Int(((wanted - 1) * Self.ratioDenominator / 2 - 0.5).rounded())
        let next = ratioLevel + max(-10, min(10, level - ratioLevel))
        if next != ratioLevel {
            ratioLevel = next
            resampler.setRatio(input: Self.ratioNumerator(level: next), output: Int(Self.ratioDenominator))
        }
        rate = Double(Self.ratioNumerator(level: ratioLevel)) / Self.ratioDenominator
        statistics.playbackRate = rate
    }

    /// Speeds are (denominator + 2·level + 1) / denominator with the denominator twice a
    /// prime (2 × 20,011): the odd numerator never shares a factor with it, so SpeexDSP
    /// never reduces the fraction. It rescales its fractional read position to each new
    /// denominator in integers, and a fraction reduced to 1/1 (a speed of exactly 1)
    /// would truncate that position: a jump of up to one sample, a click on a pure tone,
    /// each time the speed passed through 1. So there is no exact 1: the levels nearest are
    /// ±25 ppm, which no one can hear.
    private static let ratioDenominator = 40_022.0

    private static func ratioNumerator(level: Int) -> Int { 40_022 + 2 * level + 1 }

    /// Decodes, rebuilds or conceals the next frame into the FIFO. Returns false when there
    /// is nothing to play and the speaker has been silent (not in DTX) for `idleAfter`.
    private func decodeNextFrame() -> Bool {
        compactFIFO()
        guard let next = nextSequence else { return false }
        if let packet = packets[next], let expected = expectedTimestamp, packet.timestamp > expected,
           let delay = delay(afterPendingAudioPlaying: Double(packet.timestamp), now: lastReadTime) {
            // The sender was silent (DTX) since the last frame and this packet starts its next
            // words. It plays at its time, not on arrival: on arrival it would spend the whole
            // of the buffer's delay, and the words after it, on a jittery path, would come
            // late. Until then, more of the silence. It waits for the arrival-delay quantile
            // only; the target's margin the speed control adds while the words go on (waiting
            // for it too put 20 ms on every turn on a quiet path).
            if delay < targetDelay - configuration.delay.marginSeconds {
                let count = conceal(samples: 480)
                append(count: count, endTimestamp: fifoEndTimestamp)
                statistics.comfortNoiseSamples += count
                return true
            }
        }
        if let packet = packets.removeValue(forKey: next) {
            if dryRunUnderrunSamples > 0, let expected = expectedTimestamp, packet.timestamp > expected {
                // The buffer ran dry and the next packet continues the sequence with a later
                // timestamp: the sender was in DTX, so what was played meanwhile was comfort
                // noise, not concealment of lost audio; and if all of it was, the buffer did
                // not underrun at all.
                let gap = min(dryRunUnderrunSamples, Int(packet.timestamp - expected))
                statistics.underrunSamples -= gap
                statistics.comfortNoiseSamples += gap
                if gap == dryRunUnderrunSamples { statistics.underruns -= 1 }
            }
            dryRunUnderrunSamples = 0
            dryRunSamples = 0
            resumedAfterQuiet = false
            append(count: decode(packet.payload, samples: packet.samples), endTimestamp: Double(packet.timestamp + Int64(packet.samples)))
            if packet.isRedundant {
                statistics.redundancyRecovered += 1
                lastLossTime = lastReadTime
            } else {
                statistics.decodedFrames += 1
            }
            lastWasDTX = packet.payload.count <= 2
            lastFrameSamples = packet.samples
            expectedTimestamp = packet.timestamp + Int64(packet.samples)
            markPlayed(next, received: !packet.isRedundant)
            nextSequence = next + 1
            return true
        }
        if let later = packets.keys.min() {
            // `next` is due and missing while later packets are here: it is lost (or too late).
            if dryRunSamples > 0 || resumedAfterQuiet {
                // The concealment (or silence) played while the buffer was dry already
                // covered the missing frames' time; skip them rather than add their
                // duration again. After a quiet spell, skip straight to what arrived.
                let covered = resumedAfterQuiet ? Int(later - next) : max(1, dryRunSamples / lastFrameSamples)
                resumedAfterQuiet = false
                nextSequence = min(later, next + Int64(covered))
                if let expected = expectedTimestamp { expectedTimestamp = expected + Int64(covered * lastFrameSamples) }
                statistics.concealedFrames += Int(nextSequence! - next)
                for skipped in next..<nextSequence! { markPlayed(skipped, received: false) }
                lastLossTime = lastReadTime
                dryRunSamples = 0
                dryRunUnderrunSamples = 0
                return true
            }
            let expected = expectedTimestamp ?? 0
            if later == next + 1, let following = packets[later] {
                var duration = Int(following.timestamp - expected)
                if duration <= 0 || duration > OpusPacket.maximumSamples || duration % 120 != 0 { duration = lastFrameSamples }
                let count = decodeFEC(from: following.payload, samples: duration)
                append(count: count, endTimestamp: Double(expected + Int64(count)))
                statistics.fecRecovered += 1
            } else {
                let count = conceal(samples: lastFrameSamples)
                append(count: count, endTimestamp: Double(expected + Int64(count)))
                statistics.concealedFrames += 1
            }
            expectedTimestamp = expected + Int64(lastFrameSamples)
            markPlayed(next, received: false)
            lastLossTime = lastReadTime
            nextSequence = next + 1
            return true
        }
        // Nothing to play: the buffer ran dry.
        let chunk = 480
        if lastWasDTX {
            // The sender is silent on purpose; keep its comfort noise going and let media
            // time advance with it, so the delay does not grow.
            let count = conceal(samples: chunk)
            append(count: count, endTimestamp: fifoEndTimestamp + Double(count))
            statistics.comfortNoiseSamples += count
            dryRunSamples += count
            return true
        }
        if Double(dryRunSamples) >= configuration.idleAfterSeconds * Double(AudioClock.sampleRate) { return false }
        if dryRunSamples == 0 { statistics.underruns += 1 }
        lastUnderrunTime = lastReadTime
        // Conceal while waiting; media time stands still, so the delay grows by this much.
        let count = conceal(samples: chunk)
        append(count: count, endTimestamp: fifoEndTimestamp)
        statistics.underrunSamples += count
        dryRunSamples += count
        dryRunUnderrunSamples += count
        return true
    }

    private func decode(_ payload: [UInt8], samples: Int) -> Int {
        let channels = configuration.channels
        let decoded: Int? = payload.withUnsafeBytes { bytes in
            fifo.withUnsafeMutableBufferPointer { buffer in
                try? decoder.decode(bytes, into: UnsafeMutableBufferPointer(rebasing: buffer[fifoWrite..<fifoWrite + samples * channels]))
            }
        }
        // A packet libopus rejects despite a valid TOC is concealed for its duration.
        return decoded ?? conceal(samples: samples)
    }

    private func decodeFEC(from payload: [UInt8], samples: Int) -> Int {
        let channels = configuration.channels
        let decoded: Int? = payload.withUnsafeBytes { bytes in
            fifo.withUnsafeMutableBufferPointer { buffer in
                try? decoder.decodeFEC(from: bytes, samples: samples, into: UnsafeMutableBufferPointer(rebasing: buffer[fifoWrite..<fifoWrite + samples * channels]))
            }
        }
        return decoded ?? conceal(samples: samples)
    }

    private func conceal(samples: Int) -> Int {
        let channels = configuration.channels
        let rounded = max(120, samples / 120 * 120)
        let concealed: Int? = fifo.withUnsafeMutableBufferPointer { buffer in
            try? decoder.conceal(samples: rounded, into: UnsafeMutableBufferPointer(rebasing: buffer[fifoWrite..<fifoWrite + rounded * channels]))
        }
        if let concealed { return concealed }
        for index in fifoWrite..<fifoWrite + rounded * channels { fifo[index] = 0 }
        return rounded
    }

    private func append(count: Int, endTimestamp: Double) {
        fifoWrite += count * configuration.channels
        fifoEndTimestamp = endTimestamp
    }

    private func compactFIFO() {
        // Keep room for the longest packet after the write position.
        guard fifo.count - fifoWrite < OpusPacket.maximumSamples * configuration.channels * 2 else { return }
        let pending = fifoWrite - fifoRead
        fifo.withUnsafeMutableBufferPointer { buffer in
            for index in 0..<pending { buffer[index] = buffer[fifoRead + index] }
        }
        fifoRead = 0
        fifoWrite = pending
    }

    private func fill(_ output: UnsafeMutableBufferPointer<Float>, from start: Int) {
        for index in start..<output.count { output[index] = 0 }
    }

    /// Records that `sequence`'s time has passed; `received` when its own packet was
    /// played (so a second copy is a duplicate, while the first copy of a packet that was
    /// rebuilt or concealed is late).
    private func markPlayed(_ sequence: Int64, received: Bool) {
        if received { playedRecently[Int(sequence & 1_023)] = sequence }
        highestPlayed = max(highestPlayed ?? sequence, sequence)
    }

    private func restart() {
        packets.removeAll()
        sequenceUnwrapper = SequenceNumberUnwrapper()
        timestampUnwrapper = RTPTimestampUnwrapper()
        tracker.reset()
        nextSequence = nil
        expectedTimestamp = nil
        highestPlayed = nil
        highestReceived = nil
        redundancyDepth = 0
        waitingForResume = false
        resumedAfterQuiet = false
        state = .buffering
        dryRunSamples = 0
        dryRunUnderrunSamples = 0
        lastWasDTX = false
        fifoRead = fifoWrite
        decoder.reset()
    }
}
