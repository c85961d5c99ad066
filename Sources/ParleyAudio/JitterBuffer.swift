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
///
/// This file holds the state, the two entry points and the observation the decisions are
/// made from; `JitterBuffer+Operations.swift` carries the decisions out.
public final class JitterBuffer {
    public struct Configuration: Sendable {
        public var delay = DelayManager.Configuration()
        public var decisions = PlayoutDecision.Rules()
        /// Packets held at most (a power of two; 128 is 2.5 s of 20 ms frames); beyond,
        /// the oldest are dropped.
        public var capacity = 128
        /// How long after a loss the target keeps a frame of room for FEC, counted in the
        /// talker's speech (`talkTime`): a path that lost packets in their last turn still
        /// loses them when they speak again, however long the others talked meanwhile.
        public var lossMemorySeconds = 10.0
        public var channels = 1
        public init() {}
    }

    public let configuration: Configuration
    let decoder: OpusDecoder
    var delays: DelayManager
    var store: PlayoutPacketStore
    var audio: PlayoutAudioBuffer
    var stretcher = TimeStretcher()
    var statistics = JitterBufferStatistics()

    var sequenceUnwrapper = SequenceNumberUnwrapper()
    var timestampUnwrapper = RTPTimestampUnwrapper()
    /// Which of the last 1,024 sequence numbers were played from their own packet, to tell
    /// a duplicate from a packet that came after its frame was rebuilt or concealed.
    var playedRecently = [Int64](repeating: -1, count: 1_024)
    /// The highest sequence number played, rebuilt or concealed: anything at or below is late.
    var highestPlayed: Int64?

    var playing = false
    /// The frame due next, and the media time (extended RTP timestamp) it should have if
    /// nothing unusual happened; nil before the first frame plays.
    var nextSequence: Int64?
    var expectedTimestamp: Int64?
    /// The media time at the end of the pending audio, had it been played unstretched.
    var endTimestamp: Int64 = 0
    var lastFrameSamples = 960
    var senderSilent = false
    /// When a packet last carried in-band FEC. (Not every packet does: libopus adds it only
    /// where the frame before was speech, so the flag comes and goes with the words.)
    var lastFECCarried = -Double.infinity
    /// Concealment played since the buffer ran dry; the part of it played in the due frames'
    /// time (`concealInTime`), against which frames found missing later are skipped; and
    /// the part counted as underrun until the next packet tells whether it was the
    /// sender's silence (DTX) or loss.
    var dryConcealed = 0
    var coveredInTime = 0
    var dryUnderrun = 0
    /// Audio added by stretching while waiting for the frame now due.
    var waited = 0
    var lastTimeStretch = -Double.infinity
    /// When the buffer last ran dry waiting for a late packet (stretching or concealing
    /// while the due frame stood still).
    var lastWait = -Double.infinity
    var lastLossTime = -Double.infinity
    var lastRedundantCopy = -Double.infinity
    /// What the stream's dry spells turned out to be: loss, or packets held up.
    var drySpells = DrySpellMemory()
    /// The newest packet's own sequence number, against which copies' distances are measured;
    /// how far back the sender's copies reach (needed or not), and when one last came.
    var newestPrimary: Int64?
    /// The earliest packet's own sequence number: copies of frames before it were sent before
    /// this listener heard the talker (it joined, or the talker's packets began reaching it,
    /// in mid-speech), not lost on the way.
    var firstPrimary: Int64?
    var redundancyDepth = 0
    var lastRedundancySeen = -Double.infinity
    /// Copies from farther back than this many frames give no room: waiting that long would
    /// cost more than the frames are worth.
    static let maximumRedundancyDepth = 4
    /// Seconds of the talker's audio played (their silences, and waiting while dry, not
    /// counted): the clock the loss and repair memories run on, against which
    /// `lastFECCarried`, `lastRedundantCopy`, `lastLossTime` and `lastRedundancySeen` are set.
    var talkTime = 0.0
    var lastTargetUpdate = -Double.infinity
    /// The relative delay of the packet that arrived last, seconds.
    var latestDelay = 0.0
    /// For the playback-rate figure: media time removed (positive) or added (negative) by
    /// time-stretching and concealment since the last read, samples per channel.
    var mediaStretch = 0

    /// Called with every decision the playout makes and what it was made from, when set:
    /// for diagnostics (`parley-bench replay --decisions`), never on a call.
    public var decisionObserver: ((PlayoutOperation, PlayoutDecision.Observation) -> Void)?

    var sampleRate: Double { Double(AudioClock.sampleRate) }
    var reserveSamples: Int { Int(configuration.decisions.reserveSeconds * sampleRate) }

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

    static func powerOfTwo(atLeast value: Int) -> Int {
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
    /// arrival a frame is taken (the arrival-delay target, plus room for repairs: see
    /// `repairRoom`), plus the few milliseconds kept for cross-fades.
    public var targetDelay: Double { targetLead + configuration.decisions.reserveSeconds }

    /// Packets are being lost, and what comes later can repair them (in-band FEC, or
    /// redundant copies): worth a frame of delay.
    var losing: Bool {
        let memory = configuration.lossMemorySeconds
        let repairable = talkTime - lastFECCarried <= memory || talkTime - lastRedundantCopy <= memory
        return repairable && talkTime - lastLossTime <= memory
    }

    /// Frames of delay kept, while packets are being lost, so that what repairs a lost frame
    /// arrives before it is due: as many frames as the sender's redundant copies reach back
    /// (RFC 2198), so a burst that long is rebuilt whole; else one, for the next packet's
    /// in-band FEC.
    var repairFrames: Int {
        guard losing else { return 0 }
        let copiesFlowing = talkTime - lastRedundancySeen <= configuration.lossMemorySeconds
        return copiesFlowing ? max(1, redundancyDepth) : 1
    }

    var targetLead: Double {
        // The played delay is the lead plus up to a period (reads come a period apart), the
        // reserve, and the excess the buffer lets stand until a pause comes: the lead's
        // ceiling keeps all that under the configured maximum.
        let rules = configuration.decisions
        let ceiling = configuration.delay.maximumSeconds - rules.reserveSeconds - rules.periodSeconds - rules.gentleExcessSeconds
        return min(ceiling, delays.target(adding: Double(repairFrames * lastFrameSamples) / sampleRate))
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
        if isRedundant, firstPrimary.map({ sequence < $0 }) ?? true {
            // A frame from before the stream began for this listener. Played from its copy it
            // would count as a repair, and the target would keep room for repairs (as far as
            // the copies reach, 60 ms) for the talker's next 10 s of speech.
            return
        }
        let mediaSeconds = Double(extendedTimestamp) / sampleRate
        let previousPrimary = newestPrimary
        noteRedundancy(sequence: sequence, isRedundant: isRedundant)
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
            lastRedundantCopy = talkTime
        } else {
            statistics.received += 1
            if carriesFEC { lastFECCarried = talkTime }
            latestDelay = delays.record(arrival: arrival, mediaSeconds: mediaSeconds)
            learnFromDrySpell(sequence: sequence, timestamp: extendedTimestamp, previousPrimary: previousPrimary)
        }
    }

    /// A packet arrived: says what the silence before it was. Late beyond the jitter (by
    /// more than a frame): the path held packets back. On time after a gap in the sequence
    /// numbers: the packets in the gap were lost, and a buffer keeping the room it keeps now
    /// would be dry for as long as the gap outlasts the room. On time while the buffer was dry
    /// waiting for the frames before it, right after them (its timestamp where theirs end, so
    /// no silence of the sender's lies between): the dry spell was loss.
    private func learnFromDrySpell(sequence: Int64, timestamp: Int64, previousPrimary: Int64?) {
        let frameSeconds = Double(lastFrameSamples) / sampleRate
        if latestDelay > delays.jitterSeconds + frameSeconds {
            drySpells.recordStall(at: talkTime)
            return
        }
        if let previous = previousPrimary, sequence > previous + 1, sequence - previous <= Int64(store.capacity) {
            let gap = Double(sequence - previous - 1) * frameSeconds - Double(repairFrames) * frameSeconds
            if gap > 0 { drySpells.recordLoss(seconds: gap, at: talkTime) }
        }
        guard dryConcealed > 0, let next = nextSequence, let expected = expectedTimestamp, sequence > next,
              timestamp - expected <= (sequence - next) * Int64(lastFrameSamples) else { return }
        drySpells.recordLoss(seconds: Double(dryConcealed) / sampleRate, at: talkTime)
    }

    /// Learns how far back the sender's copies reach. Copies come right after their packet's
    /// own frame (`IncomingFrames` hands the primary first).
    private func noteRedundancy(sequence: Int64, isRedundant: Bool) {
        guard isRedundant else {
            if newestPrimary.map({ sequence > $0 }) ?? true { newestPrimary = sequence }
            firstPrimary = min(firstPrimary ?? sequence, sequence)
            return
        }
        guard let newest = newestPrimary else { return }
        let distance = newest &- sequence
        guard distance >= 1, distance <= Int64(Self.maximumRedundancyDepth) else { return }
        if talkTime - lastRedundancySeen > configuration.lossMemorySeconds { redundancyDepth = 0 }
        redundancyDepth = max(redundancyDepth, Int(distance))
        lastRedundancySeen = talkTime
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
            decisionObserver?(operation, observation)
            guard operations <= 8, perform(operation, observation, now: now) else { break }
        }
        if playing, audio.pending < output.count / configuration.channels {
            // Only a decoder failing over and over gets here: fill with concealment.
            concealInto(samples: output.count / configuration.channels - audio.pending)
        }
        let wasPlaying = playing || audio.pending > 0
        if playing, !senderSilent, dryUnderrun == 0 { talkTime += Double(output.count / configuration.channels) / sampleRate }
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

    func observe(now: Double) -> PlayoutDecision.Observation {
        if highestPlayed == nil { startAtTheTarget(now: now) }
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
        } else if let sequence = nextSequence, let following = store.packet(sequence + 1), following.carriesFEC,
                  expectedTimestamp.map({ following.timestamp - $0 <= Int64(OpusPacket.maximumSamples) }) ?? true {
            // Only a packet that follows the missing frame in time carries its FEC: one that
            // starts the next words after a silence (DTX) does not, and the missing frame was
            // the silence's. Nor does one encoded without it (a sender protecting with
            // redundant copies turns FEC off): decoding its "FEC" would be concealment.
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
        observation.sinceWaited = now - lastWait
        observation.lossSpell = drySpells.longestLoss(now: talkTime, memory: configuration.lossMemorySeconds)
        return observation
    }

    /// Sets the current and target delay and the playback rate, before `played` samples
    /// per channel are taken from the pending audio: the delay is that of the first.
    func updateDelayFigures(now: Double, played: Int) {
        let position = endTimestamp - Int64(audio.pending)
        statistics.targetDelayMilliseconds = targetDelay * 1_000
        if !playing {
            statistics.currentDelayMilliseconds = 0
        } else if dryUnderrun == 0, !senderSilent, let delay = delays.delay(ofMediaTime: Double(position) / sampleRate, at: now) {
            // Only the talker's own audio has a delay; while the buffer conceals or plays
            // the comfort noise of a silence, the figure stays at the last audio's.
            // A sender's timestamps can run ahead of its packets (a hostile one's, say): the
            // figure says how long audio waits, which is never less than nothing.
            statistics.currentDelayMilliseconds = max(0, delay) * 1_000
        }
        // Playback speed: media played per sample output, smoothed over about 2 s. The
        // jumps of media time at a silence are not speed; stretching and waiting are.
        if playing {
            let rate = Double(played + mediaStretch) / Double(played)
            statistics.playbackRate += (rate - statistics.playbackRate) * 0.005
        }
        mediaStretch = 0
    }

    /// The stream's first frames, when they are filed long after they arrived (held for their
    /// key in an end-to-end encrypted room), start where the target delay would have them:
    /// the frames before are dropped, not played late and caught up on for seconds (a 600 ms
    /// wait took 4 s to catch up). Only before anything was played: later, a backlog holds
    /// the words of a talker already being heard, and is caught up instead.
    private func startAtTheTarget(now: Double) {
        guard let next = nextSequence, let highest = store.highest, highest > next else { return }
        let allowance = targetLead + configuration.decisions.gentleExcessSeconds
        var start = next
        var candidate = store.contains(next) ? next : store.firstStored(after: next)
        while let sequence = candidate, let packet = store.packet(sequence),
              let lead = delays.delay(ofMediaTime: Double(packet.timestamp) / sampleRate, at: now), lead > allowance,
              let following = store.firstStored(after: sequence) {
            start = following
            candidate = following
        }
        if start > next { skipFrames(to: start, concealed: false) }
    }

    /// Records that `sequence`'s time has passed; `received` when its own packet was
    /// played (so a second copy is a duplicate, while the first copy of a packet that was
    /// rebuilt or concealed is late).
    func markPlayed(_ sequence: Int64, received: Bool) {
        playedRecently[Int(sequence & 1_023)] = received ? sequence : -1
        highestPlayed = max(highestPlayed ?? sequence, sequence)
    }

    func restart() {
        store.removeAll(base: 0)
        sequenceUnwrapper = SequenceNumberUnwrapper()
        timestampUnwrapper = RTPTimestampUnwrapper()
        delays.reset()
        nextSequence = nil
        expectedTimestamp = nil
        highestPlayed = nil
        newestPrimary = nil
        firstPrimary = nil
        redundancyDepth = 0
        drySpells.reset()
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
