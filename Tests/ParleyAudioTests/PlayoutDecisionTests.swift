import ParleyAudio
import Testing

/// The playout's decision logic, case by case: what it does with the frame that is due,
/// given what it sees. (The buffer asks whenever its decoded audio will not fill the next
/// 10 ms period plus a 2.5 ms reserve.)
@Suite("Playout decisions")
struct PlayoutDecisionTests {
    typealias Observation = PlayoutDecision.Observation
    let rules = PlayoutDecision.Rules()

    /// A frame due with its packet here, taken `lead` after its earliest arrival against a
    /// 20 ms target, with 5 ms of decoded audio pending.
    func frame(_ next: PlayoutDecision.NextFrame = .here, lead: Double = 0.020, target: Double = 0.020, pending: Double = 0.005) -> Observation {
        Observation(next: next, lead: lead, targetLead: target, jitter: 0.015, pending: pending)
    }

    @Test func aFrameOnTargetIsDecoded() {
        var observation = frame(pending: 0.0025)
        #expect(PlayoutDecision.decide(observation, rules) == .decode)
        observation.lead = 0.0285  // still under a period above the target
        #expect(PlayoutDecision.decide(observation, rules) == .decode)
    }

    /// The samples and pace of an `accelerate`, nil for anything else.
    func acceleration(_ operation: PlayoutOperation) -> (samples: Int, pace: AcceleratePace)? {
        guard case let .accelerate(samples, pace) = operation else { return nil }
        return (samples, pace)
    }

    @Test func pendingAudioBeyondTheReserveIsDelayOnlyAndMayBeCut() throws {
        // 5 ms pending, 2.5 ms reserve: cutting 2.5 ms takes the next frame no sooner.
        let cut = try #require(acceleration(PlayoutDecision.decide(frame(pending: 0.005), rules)))
        #expect(abs(cut.samples - 120) <= 1 && cut.pace == .quietOnly)
    }

    @Test func aLeadPeriodsAboveTheTargetIsShortenedByThatMuch() throws {
        var observation = frame(lead: 0.050, pending: 0.0025)
        observation.backlog = 0.060
        // Three whole periods above the target (with the 1 ms tolerance): 30 ms of excess.
        #expect(abs(PlayoutDecision.excess(observation, rules) - 0.030) < 1e-9)
        let cut = try #require(acceleration(PlayoutDecision.decide(observation, rules)))
        #expect(abs(cut.samples - 1_440) <= 1 && cut.pace == .voiced)
    }

    @Test func aSmallExcessWaitsForAPauseALargerOneShortensSpeechAtAPace() throws {
        var observation = frame(lead: 0.035, pending: 0.0025)
        // 10 ms of excess: only a quiet passage may go.
        let small = try #require(acceleration(PlayoutDecision.decide(observation, rules)))
        #expect(abs(small.samples - 480) <= 1 && small.pace == .quietOnly)
        // 30 ms: a pitch period from speech, at most every 40 ms.
        observation.lead = 0.055
        observation.backlog = 0.040
        observation.sinceTimeStretch = 0.02
        #expect(acceleration(PlayoutDecision.decide(observation, rules))?.pace == .quietOnly)
        observation.sinceTimeStretch = 0.05
        #expect(acceleration(PlayoutDecision.decide(observation, rules))?.pace == .voiced)
    }

    @Test func aDelayAboveTheMaximumShortensSpeechEvenForASmallExcess() throws {
        // 20 ms over a 380 ms target, but playing at 407.5 ms: over the 400 ms maximum.
        var observation = frame(lead: 0.395, target: 0.380, pending: 0.0125)
        observation.backlog = 0.040
        #expect(acceleration(PlayoutDecision.decide(observation, rules))?.pace == .voiced)
        observation.lead = 0.385
        #expect(acceleration(PlayoutDecision.decide(observation, rules))?.pace == .quietOnly)
    }

    @Test func aLargeBacklogIsShortenedFast() throws {
        var observation = frame(lead: 0.320, pending: 0.0025)
        observation.backlog = 0.300
        observation.sinceTimeStretch = 0
        let cut = try #require(acceleration(PlayoutDecision.decide(observation, rules)))
        #expect(abs(cut.samples - 300 * 48) <= 1 && cut.pace == .fast)
    }

    /// After a stall higher than the room kept for it, the backlog plays later than the
    /// 400 ms maximum: it is shortened at the catch-up pace until it is back under it.
    @Test func aBacklogPlayingLaterThanTheMaximumCatchesUp() throws {
        var observation = frame(lead: 0.480, target: 0.250, pending: 0.0025)
        observation.backlog = 0.300
        observation.latestDelay = 0.450
        #expect(acceleration(PlayoutDecision.decide(observation, rules))?.pace == .catchUp)
        observation.lead = 0.380
        #expect(acceleration(PlayoutDecision.decide(observation, rules))?.pace == .fast, "under the maximum")
        // The backlog has all come, but the buffer was waiting for it half a second ago.
        observation.lead = 0.480
        observation.latestDelay = 0.020
        observation.sinceWaited = 0.5
        #expect(acceleration(PlayoutDecision.decide(observation, rules))?.pace == .catchUp)
        // Late only because the reads were (the packets came on time): the usual pace.
        observation.sinceWaited = .infinity
        #expect(acceleration(PlayoutDecision.decide(observation, rules))?.pace == .fast)
    }

    @Test func whilePacketsComeLateOnlyWhatIsBufferedIsShortened() {
        // A spike is going on: the packet that came last was 300 ms late, and nothing
        // follows the due frame yet. The lead is high but there is no backlog to cut.
        var observation = frame(lead: 0.320, pending: 0.005)
        observation.latestDelay = 0.300
        #expect(PlayoutDecision.excess(observation, rules) == 0.0025)
        observation.backlog = 0.040
        #expect(abs(PlayoutDecision.excess(observation, rules) - 0.0425) < 1e-9)
    }

    @Test func aLeadUnderTheTargetIsLengthenedInSpeechIfLateInAPauseIfOnlyShortOfRepairRoom() throws {
        // 8 ms under the target: the next frame must be taken a period later.
        guard case let .preemptiveExpand(samples, quietOnly) = PlayoutDecision.decide(frame(lead: 0.012, pending: 0.0025), rules) else {
            Issue.record("a lead under the target should be lengthened")
            return
        }
        #expect(abs(samples - 480) <= 1 && !quietOnly)
        // Packets are on time (10 ms of jitter target); only the FEC room (20 ms more) is short.
        var observation = frame(lead: 0.025, target: 0.030, pending: 0.0025)
        observation.safeLead = 0.010
        guard case let .preemptiveExpand(_, roomOnly) = PlayoutDecision.decide(observation, rules) else {
            Issue.record("a lead short of the repair room should be lengthened")
            return
        }
        #expect(roomOnly)
    }

    @Test func theNextWordsAfterASilencePlayAtTheirTime() {
        var observation = frame(.afterSilence, lead: 0.008, pending: 0.0025)
        #expect(PlayoutDecision.decide(observation, rules) == .comfortNoise)
        observation.lead = 0.0195
        #expect(PlayoutDecision.decide(observation, rules) == .decode)
    }

    @Test func aLostFrameWhoseSuccessorIsHereIsRebuiltFromItsFEC() {
        #expect(PlayoutDecision.decide(frame(.rebuildable), rules) == .rebuildFromFEC)
        var dry = frame(.rebuildable)
        dry.dryConcealed = 0.050
        // Even after a dry spell: the frame's own audio beats the concealment already played.
        #expect(PlayoutDecision.decide(dry, rules) == .rebuildFromFEC)
    }

    @Test func aLostFrameWithoutItsSuccessorIsConcealedUnlessTheDrySpellCoveredIt() {
        var observation = frame(.missing)
        #expect(PlayoutDecision.decide(observation, rules) == .conceal)
        observation.dryConcealed = 0.030
        #expect(PlayoutDecision.decide(observation, rules) == .skipConcealed)
    }

    @Test func aFrameNotYetHereIsWaitedForByStretchingWhileItCanStillCome() {
        var observation = frame(.none, lead: 0.020)
        #expect(PlayoutDecision.decide(observation, rules) == .stretchToWait)
        observation.waited = 0.040
        #expect(PlayoutDecision.decide(observation, rules) == .concealWhileDry, "the stretch is already as long as allowed")
        observation.waited = 0.010
        observation.lead = 0.046  // the next packet is overdue: 20 ms frame + 15 ms jitter + 10 ms
        #expect(PlayoutDecision.decide(observation, rules) == .concealWhileDry)
        observation.lead = 0.020
        observation.dryConcealed = 0.010
        #expect(PlayoutDecision.decide(observation, rules) == .concealWhileDry, "once concealing, no stretching")
    }

    /// With a frame of room kept for repairs, the packet after the due one would be here if
    /// it were coming: the due frame is lost, and is concealed in its time; when its
    /// successor comes, the frame is skipped, not rebuilt late. After three frames' worth,
    /// packets may be held up, and the buffer lets the delay grow to wait for them.
    @Test func withRepairRoomKeptAMissingFrameWhoseSuccessorIsOverdueIsConcealedInItsTime() {
        var observation = frame(.none, lead: 0.050, target: 0.040, pending: 0.0025)
        observation.safeLead = 0.020
        observation.jitter = 0.020
        #expect(PlayoutDecision.decide(observation, rules) == .concealInTime)
        observation.dryConcealed = 0.040
        observation.coveredInTime = 0.040
        #expect(PlayoutDecision.decide(observation, rules) == .concealInTime)
        observation.next = .rebuildable
        #expect(PlayoutDecision.decide(observation, rules) == .skipConcealed)
        observation.next = .none
        observation.dryConcealed = 0.060
        observation.coveredInTime = 0.060
        #expect(PlayoutDecision.decide(observation, rules) == .concealWhileDry)
    }

    /// On a path whose recent dry spells were loss (the packet after each came on time), a
    /// missing frame is concealed in its time for as long as the longest of them lasted, and
    /// a frame more, up to `maximumLossSpellSeconds`: a burst of loss leaves the words after
    /// it where they were. Without that evidence (or on a path that held packets back
    /// lately, which the buffer reports as no loss spell) the rule stays three frames.
    @Test func aPathKnownToLoseInLongBurstsHasThemConcealedInTheirTime() {
        var observation = frame(.none, lead: 0.050, target: 0.040, pending: 0.0025)
        observation.safeLead = 0.020
        observation.jitter = 0.020
        observation.dryConcealed = 0.060
        observation.coveredInTime = 0.060
        #expect(PlayoutDecision.decide(observation, rules) == .concealWhileDry)
        observation.lossSpell = 0.150
        #expect(PlayoutDecision.decide(observation, rules) == .concealInTime)
        observation.dryConcealed = 0.170
        observation.coveredInTime = 0.170
        #expect(PlayoutDecision.decide(observation, rules) == .concealWhileDry, "the spell and a frame are covered")
        observation.lossSpell = 5
        observation.dryConcealed = 0.390
        observation.coveredInTime = 0.390
        #expect(PlayoutDecision.decide(observation, rules) == .concealInTime)
        observation.dryConcealed = 0.400
        observation.coveredInTime = 0.400
        #expect(PlayoutDecision.decide(observation, rules) == .concealWhileDry, "never beyond the maximum")
    }

    /// A path that stalls for half a second (a Wi-Fi stall on both hops of a relayed call)
    /// is waited out: its words still come and play late. Dry for longer, the speaker has
    /// stopped.
    @Test func aStallOfHalfASecondIsWaitedOutLongerTheSpeakerHasStopped() {
        var observation = frame(.none, lead: 0.550)
        observation.dryConcealed = 0.500
        #expect(PlayoutDecision.decide(observation, rules) == .concealWhileDry)
        observation.dryConcealed = 0.600
        #expect(PlayoutDecision.decide(observation, rules) == .goQuiet)
        observation.playing = false
        #expect(PlayoutDecision.decide(observation, rules) == .waitInSilence)
    }

    @Test func aSenderInDTXGetsComfortNoiseNotConcealment() {
        var observation = frame(.none)
        observation.senderSilent = true
        #expect(PlayoutDecision.decide(observation, rules) == .comfortNoise)
    }

    @Test func playbackStartsWhenTheFirstPacketReachesTheTarget() {
        var observation = frame(.afterSilence, lead: 0.010, pending: 0)
        observation.playing = false
        #expect(PlayoutDecision.decide(observation, rules) == .waitInSilence)
        observation.lead = 0.020
        #expect(PlayoutDecision.decide(observation, rules) == .decode)
        observation.next = .none
        #expect(PlayoutDecision.decide(observation, rules) == .waitInSilence)
    }
}
