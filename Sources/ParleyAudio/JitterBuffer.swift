import ParleyWire

/// The playout for one remote speaker: turns packets that arrive late, early, out of
/// order, twice or not at all into a steady stream of audio in exact playback-period
/// chunks, as close behind the packets' arrival as their jitter allows. Modelled on
/// WebRTC's NetEQ.
///
/// - **Target.** `DelayManager` measures each packet's delay above the fastest ones and
///   keeps a target: a high quantile of recent delays, raised to cover delay spikes only
///   when they recur. While the stream is losing packets and they carry in-band FEC, the
///   target keeps one more frame, so the packet after a lost one is here in time to
///   rebuild it.
/// - **Decisions.** Each time the decoded audio will not fill the next period, the
///   `PlayoutDecision` function says what to do with the frame that is due: decode it
///   (shortening or lengthening the audio towards the target), rebuild it from the next
///   packet's FEC, wait for it by stretching what is decoded, conceal it (Opus PLC), or
///   play comfort noise while the sender is silent (DTX).
/// - **Delay moves without pitch changes.** `TimeStretcher` removes or repeats whole pitch
///   periods of voiced speech and cuts or repeats quiet passages, so a spike's backlog is
///   played out in about a second and the delay follows the target without the pitch
///   glides resampling would make. Clock drift is absorbed the same way, a period at a time.
/// - **Order and loss.** Packets are keyed by extended sequence number; a reordered packet
///   that comes before its time plays, one that comes after is counted late. DTX is told
///   from loss by sequence numbers: a timestamp jump with consecutive sequence numbers is
///   the sender's silence, and the packet after it plays at its time, not on arrival.
///
/// Plain Swift with time passed in (seconds on the receiver's clock), so tests drive it
/// with packet traces. Not thread-safe: the network thread inserts and the playback thread
/// reads, so the call layer guards it with a lock. Nothing allocates after `init` on the
/// playback side; a read does a bounded amount of work.
public final class JitterBuffer {
    public struct Configuration: Sendable {
        public var delay = DelayManager.Configuration()
        public var decisions = PlayoutDecision.Rules()
        /// Packets held at most (a power of two; 128 is 2.5 s of 20 ms frames); beyond,
        /// the oldest are dropped.
        public var capacity = 128
        /// How long after a loss the target keeps a frame of room for FEC.
        public var lossMemorySeconds = 10.0
        public var channels = 1
        public init() {}
    }

    public let configuration: Configuration
    private let decoder: OpusDecoder
    private var delays: DelayManager
    private var store: PlayoutPacketStore
    private var audio: PlayoutAudioBuffer
    private var stretcher = TimeStretcher()
    private var statistics = JitterBufferStatistics()

    private var sequenceUnwrapper = SequenceNumberUnwrapper()
    private var timestampUnwrapper = RTPTimestampUnwrapper()
    /// Which of the last 1,024 sequence numbers were played from their own packet, to tell
    /// a duplicate from a packet that came after its frame was rebuilt or concealed.
    private var playedRecently = [Int64](repeating: -1, count: 1_024)
    /// The highest sequence number played, rebuilt or concealed: anything at or below is late.
    private var highestPlayed: Int64?

    private var playing = false
    /// The frame due next, and the media time (extended RTP timestamp) it should have if
    /// nothing unusual happened; nil before the first frame plays.
    private var nextSequence: Int64?
    private var expectedTimestamp: Int64?
    /// The media time at the end of the pending audio, had it been played unstretched.
    private var endTimestamp: Int64 = 0
    private var lastFrameSamples = 960
    private var senderSilent = false
    /// When a packet last carried in-band FEC. (Not every packet does: libopus adds it only
    /// where the frame before was speech, so the flag comes and goes with the words.)
    private var lastFECCarried = -Double.infinity
    /// Concealment played since the buffer ran dry; the part of it played in the due frames'
    /// time (`concealInTime`), against which frames found missing later are skipped; and
    /// the part counted as underrun until the next packet tells whether it was the
    /// sender's silence (DTX) or loss.
    private var dryConcealed = 0
    private var coveredInTime = 0
    private var dryUnderrun = 0
    /// Audio added by stretching while waiting for the frame now due.
    private var waited = 0
    private var lastTimeStretch = -Double.infinity
    private var lastLossTime = -Double.infinity
    private var lastRedundantCopy = -Double.infinity
    private var lastReadTime = 0.0
    private var lastTargetUpdate = -Double.infinity
    /// The relative delay of the packet that arrived last, seconds.
    private var latestDelay = 0.0
    /// For the playback-rate figure: media time removed (positive) or added (negative) by
    /// time-stretching and concealment since the last read, samples per channel.
    private var mediaStretch = 0

    private var sampleRate: Double { Double(AudioClock.sampleRate) }
    private var reserveSamples: Int { Int(configuration.decisions.reserveSeconds * sampleRate) }

    public init(_ configuration: Configuration = Configuration()) throws {
        var configuration = configuration
        configuration.capacity = Self.powerOfTwo(atLeast: max(8, configuration.capacity))
        configuration.decisions.maximumDelaySeconds = configuration.delay.maximumSeconds
        self.configuration = configuration
        decoder = try OpusDecoder(channels: configuration.channels)
        delays = DelayManager(configuration.delay)
        store = PlayoutPacketStore(capacity: configuration.capacity)
        audio = PlayoutAudioBuffer(
            channels: configuration.channels, history: max(TimeStretcher.pause, 2 * TimeStretcher.maximumPeriod + PitchPeriodSearch.maximumWindow),
            capacity: 4 * OpusPacket.maximumSamples)
        statistics.targetDelayMilliseconds = (delays.targetSeconds + configuration.decisions.reserveSeconds) * 1_000
    }

    private static func powerOfTwo(atLeast value: Int) -> Int {
        var result = 1
        while result < value { result <<= 1 }
        return result
    }

    /// The counts and delays for the status line.
    public var currentStatistics: JitterBufferStatistics {
        var current = statistics
        current.unresolvedUnderrunSamples = dryUnderrun
        return current
    }

    /// The delay the buffer aims for, in seconds: how long after its earliest possible
    /// arrival a frame is taken (the arrival-delay target, plus a frame while the stream
    /// is losing packets that carry FEC), plus the few milliseconds kept for cross-fades.
    public var targetDelay: Double { targetLead + configuration.decisions.reserveSeconds }

    /// Packets are being lost, and what comes later can repair them (in-band FEC, or
    /// redundant copies): worth a frame of delay.
    private var losing: Bool {
        let memory = configuration.lossMemorySeconds
        let repairable = lastReadTime - lastFECCarried <= memory || lastReadTime - lastRedundantCopy <= memory
        return repairable && lastReadTime - lastLossTime <= configuration.lossMemorySeconds
    }

    private var targetLead: Double {
        // The played delay is the lead plus up to a period (reads come a period apart) and
        // the reserve: the lead's ceiling keeps that under the configured maximum.
        let ceiling = configuration.delay.maximumSeconds - configuration.decisions.reserveSeconds - configuration.decisions.periodSeconds
        return min(ceiling, delays.target(adding: losing ? Double(lastFrameSamples) / sampleRate : 0))
    }

    // MARK: Network side

    /// Accepts one packet's Opus payload with its RTP sequence number and timestamp,
    /// received at `arrival` (seconds, the same clock `read` is given). A redundant copy
    /// (`isRedundant`: a frame repeated in a later packet, RFC 2198) only fills a frame
    /// that is missing and not yet played; it says nothing about the network's delay (it
    /// comes late by design) and is not counted as a duplicate or late when not needed.
    public func insert(payload: UnsafeRawBufferPointer, sequenceNumber: UInt16, timestamp: UInt32, arrival: Double, isRedundant: Bool = false) {
        guard let samples = OpusDecoder.sampleCount(of: payload), samples <= OpusPacket.maximumSamples,
              payload.count <= PlayoutPacketStore.maximumPayload else {
            if !isRedundant { statistics.invalid += 1 }
            return
        }
        var sequence = sequenceUnwrapper.unwrap(sequenceNumber)
        var extendedTimestamp = timestampUnwrapper.unwrap(timestamp)
        if let next = nextSequence, abs(sequence - next) > 3_000 {
            guard !isRedundant else { return }
            // A jump this large is a restarted sender (new sequence space), not reordering.
            restart()
            sequence = sequenceUnwrapper.unwrap(sequenceNumber)
            extendedTimestamp = timestampUnwrapper.unwrap(timestamp)
            statistics.restarts += 1
        }
        let mediaSeconds = Double(extendedTimestamp) / sampleRate
        if let highest = highestPlayed, sequence <= highest {
            guard !isRedundant else { return }
            if playedRecently[Int(sequence & 1_023)] == sequence {
                statistics.duplicates += 1
            } else {
                statistics.late += 1
                // A late packet still tells how late the network is running.
                delays.record(arrival: arrival, mediaSeconds: mediaSeconds)
            }
            return
        }
        if store.contains(sequence) {
            if !isRedundant { statistics.duplicates += 1 }
            return
        }
        if !playing, nextSequence.map({ sequence < $0 }) ?? true {
            // Not playing yet: start from the earliest packet seen (if the store can span it).
            if let highest = store.highest, highest - sequence >= Int64(store.capacity) { return }
            nextSequence = sequence
            store.rebase(to: sequence)
        }
        let carriesFEC = OpusInBandFEC.isCarried(by: payload)
        guard let evicted = store.store(payload, sequence: sequence, timestamp: extendedTimestamp, samples: samples, carriesFEC: carriesFEC, isRedundant: isRedundant) else {
            return
        }
        statistics.overflowed += evicted
        if isRedundant {
            statistics.redundantCopiesStored += 1
            lastRedundantCopy = arrival
        } else {
            statistics.received += 1
            if carriesFEC { lastFECCarried = arrival }
            latestDelay = delays.record(arrival: arrival, mediaSeconds: mediaSeconds)
        }
    }

    public func insert(payload: [UInt8], sequenceNumber: UInt16, timestamp: UInt32, arrival: Double, isRedundant: Bool = false) {
        payload.withUnsafeBytes {
            insert(payload: $0, sequenceNumber: sequenceNumber, timestamp: timestamp, arrival: arrival, isRedundant: isRedundant)
        }
    }

    // MARK: Playback side

    /// Fills `output` (one playback period, interleaved) with the next audio at time `now`.
    /// Returns false when it wrote silence because the speaker is not sending (before the
    /// first packet's time, or after they stopped).
    @discardableResult
    public func read(into output: UnsafeMutableBufferPointer<Float>, now: Double) -> Bool {
        lastReadTime = now
        if now - lastTargetUpdate >= 0.1 {
            delays.update(now: now)
            lastTargetUpdate = now
        }
        let need = output.count / configuration.channels + reserveSamples
        var operations = 0
        while audio.pending < need {
            operations += 1
            let observation = observe(now: now)
            let operation = PlayoutDecision.decide(observation, configuration.decisions)
            guard operations <= 8, perform(operation, observation, now: now) else { break }
        }
        if playing, audio.pending < output.count / configuration.channels {
            // Only a decoder failing over and over gets here: fill with concealment.
            concealInto(samples: output.count / configuration.channels - audio.pending)
        }
        let wasPlaying = playing || audio.pending > 0
        updateDelayFigures(now: now, played: output.count / configuration.channels)
        audio.read(into: output)
        return wasPlaying
    }

    /// Convenience for tests and tools: reads one chunk of `samples` into a new array.
    public func read(samples: Int, now: Double) -> [Float] {
        var chunk = [Float](repeating: 0, count: samples * configuration.channels)
        chunk.withUnsafeMutableBufferPointer { _ = read(into: $0, now: now) }
        return chunk
    }

    // MARK: Observing

    private func observe(now: Double) -> PlayoutDecision.Observation {
        if !playing, let next = nextSequence, !store.contains(next), let first = store.firstStored(after: next - 1) {
            // Resuming after the speaker stopped: what was not received meanwhile is gone.
            skipFrames(to: first, concealed: true)
        }
        if let next = nextSequence, store.base > next {
            // The store overflowed and pushed the due frames out.
            skipFrames(to: store.base, concealed: false)
        }
        let next = nextSequence.flatMap { store.packet($0) }
        let frame: PlayoutDecision.NextFrame
        if let packet = next {
            frame = expectedTimestamp.map { packet.timestamp > $0 } ?? true ? .afterSilence : .here
        } else if let sequence = nextSequence, store.contains(sequence + 1) {
            frame = .rebuildable
        } else if store.count > 0 {
            frame = .missing
        } else {
            frame = .none
        }
        let mediaTime = next?.timestamp ?? expectedTimestamp ?? endTimestamp
        var observation = PlayoutDecision.Observation(
            next: frame,
            lead: delays.delay(ofMediaTime: Double(mediaTime) / sampleRate, at: now) ?? 0,
            targetLead: targetLead,
            safeLead: delays.targetSeconds,
            jitter: delays.targetSeconds,
            pending: Double(audio.pending) / sampleRate)
        observation.playing = playing
        if let sequence = nextSequence {
            var following = sequence + 1
            while store.contains(following) { following += 1 }
            observation.backlog = Double(Int(following - sequence - 1) * lastFrameSamples) / sampleRate
        }
        observation.latestDelay = latestDelay
        observation.frameSeconds = Double(lastFrameSamples) / sampleRate
        observation.senderSilent = senderSilent
        observation.dryConcealed = Double(dryConcealed) / sampleRate
        observation.waited = Double(waited) / sampleRate
        observation.coveredInTime = Double(coveredInTime) / sampleRate
        observation.sinceTimeStretch = now - lastTimeStretch
        return observation
    }

    // MARK: Operations

    /// Carries out `operation`; false when the read should stop asking (silence follows).
    private func perform(_ operation: PlayoutOperation, _ observation: PlayoutDecision.Observation, now: Double) -> Bool {
        switch operation {
        case .decode:
            decodeNext()
        case let .accelerate(maximum, pace):
            decodeNext()
            if audio.pending < TimeStretcher.accelerateNeeds + reserveSamples, case .here? = nextFrameState() {
                decodeNext()
            }
            record(stretcher.accelerate(&audio, maximum: maximum, pace: pace), shortened: true, now: now)
        case let .preemptiveExpand(maximum, quietOnly):
            decodeNext()
            record(stretcher.expand(&audio, quietMaximum: maximum, quietOnly: quietOnly), shortened: false, now: now)
        case .rebuildFromFEC:
            rebuildFromFEC()
        case .conceal:
            concealLostFrame()
        case .skipConcealed:
            skipConcealedFrame(now: now)
        case .stretchToWait:
            let outcome = stretcher.extend(&audio, minimum: TimeStretcher.minimumPeriod)
            if outcome == .notPossible {
                concealWhileDry(inTime: false)
            } else {
                waited += outcome.samples
                statistics.waitStretchedSamples += outcome.samples
                mediaStretch -= outcome.samples
            }
        case .concealWhileDry:
            concealWhileDry(inTime: false)
        case .concealInTime:
            concealWhileDry(inTime: true)
        case .comfortNoise:
            let count = concealInto(samples: 480)
            endTimestamp += Int64(count)
            statistics.comfortNoiseSamples += count
            if observation.next == .none {
                // The sender's silence: media time moves on with it.
                expectedTimestamp = expectedTimestamp.map { $0 + Int64(count) }
            }
        case .waitInSilence:
            return false
        case .goQuiet:
            playing = false
            return false
        }
        return true
    }

    private func nextFrameState() -> PlayoutDecision.NextFrame? {
        guard let next = nextSequence, let packet = store.packet(next) else { return nil }
        return expectedTimestamp.map { packet.timestamp > $0 } ?? true ? .afterSilence : .here
    }

    /// Decodes the due frame from its packet (which is here).
    private func decodeNext() {
        guard let sequence = nextSequence, let packet = store.packet(sequence) else { return }
        if dryUnderrun > 0, let expected = expectedTimestamp, packet.timestamp > expected {
            // The buffer ran dry and the next packet continues the sequence with a later
            // timestamp: the sender was in DTX, so what was played meanwhile was comfort
            // noise, not concealment of lost audio; and if all of it was, the buffer did
            // not underrun at all.
            let gap = min(dryUnderrun, Int(packet.timestamp - expected))
            statistics.underrunSamples -= gap
            statistics.comfortNoiseSamples += gap
            if gap == dryUnderrun { statistics.underruns -= 1 }
        }
        playing = true
        dryConcealed = 0
        coveredInTime = 0
        dryUnderrun = 0
        waited = 0
        let decoded = store.withPayload(sequence) { payload in
            audio.append(upTo: packet.samples) { buffer in
                (try? decoder.decode(payload, into: buffer)) ?? concealRaw(samples: packet.samples, into: buffer)
            }
        }
        if packet.isRedundant {
            statistics.redundancyRecovered += 1
            lastLossTime = lastReadTime
        } else {
            statistics.decodedFrames += 1
        }
        senderSilent = packet.length <= 2
        lastFrameSamples = packet.samples
        expectedTimestamp = packet.timestamp + Int64(packet.samples)
        endTimestamp = packet.timestamp + Int64(decoded)
        markPlayed(sequence, received: true)
        nextSequence = sequence + 1
        store.advance(to: sequence + 1)
    }

    private func rebuildFromFEC() {
        guard let sequence = nextSequence, let following = store.packet(sequence + 1) else { return }
        let expected = expectedTimestamp ?? following.timestamp - Int64(lastFrameSamples)
        var duration = Int(following.timestamp - expected)
        if duration <= 0 || duration > OpusPacket.maximumSamples || duration % 120 != 0 { duration = lastFrameSamples }
        let count = store.withPayload(sequence + 1) { payload in
            audio.append(upTo: duration) { buffer in
                (try? decoder.decodeFEC(from: payload, samples: duration, into: buffer)) ?? concealRaw(samples: duration, into: buffer)
            }
        }
        statistics.fecRecovered += 1
        lastLossTime = lastReadTime
        dryConcealed = 0
        coveredInTime = 0
        dryUnderrun = 0
        waited = 0
        playing = true
        endTimestamp = expected + Int64(count)
        advance(byMedia: duration, received: false)
    }

    private func concealLostFrame() {
        let count = concealInto(samples: lastFrameSamples)
        statistics.concealedFrames += 1
        lastLossTime = lastReadTime
        waited = 0
        endTimestamp = (expectedTimestamp ?? endTimestamp) + Int64(count)
        advance(byMedia: lastFrameSamples, received: false)
    }

    /// Conceals 10 ms while nothing is here to decode. Counted as underrun until a packet
    /// says otherwise (DTX silence, or a loss whose frame is then skipped).
    private func concealWhileDry(inTime: Bool) {
        let count = concealInto(samples: 480)
        if dryUnderrun == 0 { statistics.underruns += 1 }
        dryConcealed += count
        dryUnderrun += count
        statistics.underrunSamples += count
        if inTime {
            // The due frame's time passes with the concealment: the delay does not grow.
            endTimestamp += Int64(count)
            coveredInTime += count
        } else {
            // Media time stands still: the due frame may still come, and the delay grows.
            mediaStretch -= count
        }
    }

    /// Counts the due frame concealed by what the dry spell already played, and moves on.
    private func skipConcealedFrame(now: Double) {
        let frame = lastFrameSamples
        dryConcealed = max(0, dryConcealed - frame)
        let covered = min(frame, coveredInTime)
        coveredInTime -= covered
        if covered > 0, dryUnderrun > 0 {
            // Concealment of a lost frame in its time, not an underrun after all.
            let taken = min(covered, dryUnderrun)
            dryUnderrun -= taken
            statistics.underrunSamples -= taken
            if dryUnderrun == 0 { statistics.underruns -= 1 }
        }
        statistics.concealedFrames += 1
        lastLossTime = now
        advance(byMedia: frame, received: false)
        let end = max(endTimestamp, expectedTimestamp ?? endTimestamp)
        mediaStretch += Int(end - endTimestamp)
        endTimestamp = end
    }

    /// Moves past the due frame (its time was filled by FEC or concealment).
    private func advance(byMedia samples: Int, received: Bool) {
        guard let sequence = nextSequence else { return }
        markPlayed(sequence, received: received)
        expectedTimestamp = expectedTimestamp.map { $0 + Int64(samples) }
        nextSequence = sequence + 1
        store.advance(to: sequence + 1)
    }

    /// Jumps from the due frame to `sequence`, the frames between counted as concealed (or
    /// dropped for lack of room), with a cross-fade into what comes next.
    private func skipFrames(to sequence: Int64, concealed: Bool) {
        guard let next = nextSequence, sequence > next else { return }
        let skipped = Int(sequence - next)
        if concealed { statistics.concealedFrames += skipped }
        for frame in next..<min(sequence, next + 1_024) { markPlayed(frame, received: false) }
        expectedTimestamp = expectedTimestamp.map { $0 + Int64(skipped * lastFrameSamples) }
        nextSequence = sequence
        store.advance(to: sequence)
    }

    /// Conceals `samples` (rounded to whole 2.5 ms steps) into the pending audio; returns how many.
    @discardableResult
    private func concealInto(samples: Int) -> Int {
        let rounded = max(120, samples / 120 * 120)
        return audio.append(upTo: rounded) { buffer in concealRaw(samples: rounded, into: buffer) }
    }

    private func concealRaw(samples: Int, into buffer: UnsafeMutableBufferPointer<Float>) -> Int {
        let rounded = max(120, samples / 120 * 120)
        if let count = try? decoder.conceal(samples: rounded, into: buffer) { return count }
        for index in 0..<min(buffer.count, rounded * configuration.channels) { buffer[index] = 0 }
        return rounded
    }

    private func record(_ outcome: TimeStretcher.Outcome, shortened: Bool, now: Double) {
        guard outcome != .notPossible else { return }
        lastTimeStretch = now
        if shortened {
            statistics.accelerations += 1
            statistics.acceleratedSamples += outcome.samples
            mediaStretch += outcome.samples
        } else {
            statistics.expansions += 1
            statistics.expandedSamples += outcome.samples
            mediaStretch -= outcome.samples
        }
    }

    /// Sets the current and target delay and the playback rate, before `played` samples
    /// per channel are taken from the pending audio: the delay is that of the first.
    private func updateDelayFigures(now: Double, played: Int) {
        let position = endTimestamp - Int64(audio.pending)
        statistics.targetDelayMilliseconds = targetDelay * 1_000
        if !playing {
            statistics.currentDelayMilliseconds = 0
        } else if dryUnderrun == 0, !senderSilent, let delay = delays.delay(ofMediaTime: Double(position) / sampleRate, at: now) {
            // Only the talker's own audio has a delay; while the buffer conceals or plays
            // the comfort noise of a silence, the figure stays at the last audio's.
            statistics.currentDelayMilliseconds = delay * 1_000
        }
        // Playback speed: media played per sample output, smoothed over about 2 s. The
        // jumps of media time at a silence are not speed; stretching and waiting are.
        if playing {
            let rate = Double(played + mediaStretch) / Double(played)
            statistics.playbackRate += (rate - statistics.playbackRate) * 0.005
        }
        mediaStretch = 0
    }

    /// Records that `sequence`'s time has passed; `received` when its own packet was
    /// played (so a second copy is a duplicate, while the first copy of a packet that was
    /// rebuilt or concealed is late).
    private func markPlayed(_ sequence: Int64, received: Bool) {
        playedRecently[Int(sequence & 1_023)] = received ? sequence : -1
        highestPlayed = max(highestPlayed ?? sequence, sequence)
    }

    private func restart() {
        store.removeAll(base: 0)
        sequenceUnwrapper = SequenceNumberUnwrapper()
        timestampUnwrapper = RTPTimestampUnwrapper()
        delays.reset()
        nextSequence = nil
        expectedTimestamp = nil
        highestPlayed = nil
        playing = false
        dryConcealed = 0
        coveredInTime = 0
        dryUnderrun = 0
        waited = 0
        senderSilent = false
        mediaStretch = 0
        audio.discardPending()
        decoder.reset()
    }
}
