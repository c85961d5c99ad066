import ParleyWire

/// Carrying out the playout's decisions: decoding, rebuilding from FEC, concealing,
/// time-stretching and comfort noise, each keeping the media timeline and the statistics
/// in step with the audio it adds.
extension JitterBuffer {
    /// Carries out `operation`; false when the read should stop asking (silence follows).
    func perform(_ operation: PlayoutOperation, _ observation: PlayoutDecision.Observation, now: Double) -> Bool {
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
            lastWait = now
            let outcome = stretcher.extend(&audio, minimum: TimeStretcher.minimumPeriod)
            if outcome == .notPossible {
                concealWhileDry(inTime: false)
            } else {
                waited += outcome.samples
                statistics.waitStretchedSamples += outcome.samples
                mediaStretch -= outcome.samples
            }
        case .concealWhileDry:
            lastWait = now
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

    func nextFrameState() -> PlayoutDecision.NextFrame? {
        guard let next = nextSequence, let packet = store.packet(next) else { return nil }
        return expectedTimestamp.map { packet.timestamp > $0 } ?? true ? .afterSilence : .here
    }

    /// Decodes the due frame from its packet (which is here).
    func decodeNext() {
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
        // A frame that comes after part of its time was concealed in time (a redundant copy
        // the buffer waited for) takes over from there: it plays no longer than its time.
        // One that comes after all of it (packets held up, not lost) plays whole, late.
        var covered = 0
        if coveredInTime > 0, coveredInTime + Self.spliceFade <= packet.samples, expectedTimestamp == packet.timestamp {
            covered = takeCoveredInTime(upTo: coveredInTime)
        }
        playing = true
        dryConcealed = 0
        coveredInTime = 0
        dryUnderrun = 0
        waited = 0
        let before = audio.pending
        let decoded = store.withPayload(sequence) { payload in
            audio.append(upTo: packet.samples) { buffer in
                (try? decoder.decode(payload, into: buffer)) ?? concealRaw(samples: packet.samples, into: buffer)
            }
        }
        if covered > 0, before + Self.spliceFade + covered <= audio.pending {
            TimeStretcher.jumpForward(&audio, offset: before, by: covered, crossFade: Self.spliceFade)
        }
        if packet.isRedundant {
            statistics.redundancyRecovered += 1
            lastLossTime = talkTime
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

    func rebuildFromFEC() {
        guard let sequence = nextSequence, let following = store.packet(sequence + 1) else { return }
        let expected = expectedTimestamp ?? following.timestamp - Int64(lastFrameSamples)
        var duration = Int(following.timestamp - expected)
        if duration <= 0 || duration > OpusPacket.maximumSamples || duration % 120 != 0 { duration = lastFrameSamples }
        // Part of the frame's time may already have been concealed in time: the rebuilt
        // audio takes over from there, or the frame would play longer than it lasts.
        let covered = takeCoveredInTime(upTo: duration - Self.spliceFade)
        let before = audio.pending
        let count = store.withPayload(sequence + 1) { payload in
            audio.append(upTo: duration) { buffer in
                (try? decoder.decodeFEC(from: payload, samples: duration, into: buffer)) ?? concealRaw(samples: duration, into: buffer)
            }
        }
        if covered > 0, before + Self.spliceFade + covered <= audio.pending {
            TimeStretcher.jumpForward(&audio, offset: before, by: covered, crossFade: Self.spliceFade)
        }
        statistics.fecRecovered += 1
        lastLossTime = talkTime
        dryConcealed = 0
        coveredInTime = 0
        dryUnderrun = 0
        waited = 0
        playing = true
        endTimestamp = expected + Int64(count)
        advance(byMedia: duration, received: false)
    }

    func concealLostFrame() {
        // The concealment the dry spell already played (less than a frame's, or the frame
        // would have been skipped) counts towards this frame: the frame lasts no longer than
        // its time. What was played while media time stood still becomes this frame's time.
        let inTime = takeCoveredInTime(upTo: lastFrameSamples)
        let waitedOut = min(dryConcealed, lastFrameSamples - inTime)
        dryConcealed -= waitedOut
        mediaStretch += waitedOut
        let covered = inTime + waitedOut
        let count = covered < lastFrameSamples ? concealInto(samples: lastFrameSamples - covered) : 0
        statistics.concealedFrames += 1
        lastLossTime = talkTime
        waited = 0
        endTimestamp = (expectedTimestamp ?? endTimestamp) + Int64(covered + count)
        advance(byMedia: lastFrameSamples, received: false)
    }

    /// Cross-fade of a splice inside a frame, samples per channel (2.5 ms).
    static let spliceFade = 120

    /// Takes up to `limit` samples of the concealment played in the due frames' time while
    /// the buffer was dry, for the due frame: that part of its time has been played. It was
    /// counted as underrun until now; it was the frame's concealment.
    func takeCoveredInTime(upTo limit: Int) -> Int {
        let covered = max(0, min(limit, coveredInTime))
        guard covered > 0 else { return 0 }
        coveredInTime -= covered
        dryConcealed = max(0, dryConcealed - covered)
        if dryUnderrun > 0 {
            let taken = min(covered, dryUnderrun)
            dryUnderrun -= taken
            statistics.underrunSamples -= taken
            if dryUnderrun == 0 { statistics.underruns -= 1 }
        }
        return covered
    }

    /// Conceals 10 ms while nothing is here to decode. Counted as underrun until a packet
    /// says otherwise (DTX silence, or a loss whose frame is then skipped).
    func concealWhileDry(inTime: Bool) {
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
    func skipConcealedFrame(now: Double) {
        let frame = lastFrameSamples
        // Concealment of a lost frame in its time, not an underrun after all.
        let covered = takeCoveredInTime(upTo: frame)
        dryConcealed = max(0, dryConcealed - (frame - covered))
        statistics.concealedFrames += 1
        lastLossTime = talkTime
        advance(byMedia: frame, received: false)
        let end = max(endTimestamp, expectedTimestamp ?? endTimestamp)
        mediaStretch += Int(end - endTimestamp)
        endTimestamp = end
    }

    /// Moves past the due frame (its time was filled by FEC or concealment).
    func advance(byMedia samples: Int, received: Bool) {
        guard let sequence = nextSequence else { return }
        markPlayed(sequence, received: received)
        expectedTimestamp = expectedTimestamp.map { $0 + Int64(samples) }
        nextSequence = sequence + 1
        store.advance(to: sequence + 1)
    }

    /// Jumps from the due frame to `sequence`, the frames between counted as concealed (or
    /// dropped for lack of room), with a cross-fade into what comes next.
    func skipFrames(to sequence: Int64, concealed: Bool) {
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
    func concealInto(samples: Int) -> Int {
        let rounded = max(120, samples / 120 * 120)
        return audio.append(upTo: rounded) { buffer in concealRaw(samples: rounded, into: buffer) }
    }

    func concealRaw(samples: Int, into buffer: UnsafeMutableBufferPointer<Float>) -> Int {
        let rounded = max(120, samples / 120 * 120)
        if let count = try? decoder.conceal(samples: rounded, into: buffer) { return count }
        for index in 0..<min(buffer.count, rounded * configuration.channels) { buffer[index] = 0 }
        return rounded
    }

    func record(_ outcome: TimeStretcher.Outcome, shortened: Bool, now: Double) {
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
}
