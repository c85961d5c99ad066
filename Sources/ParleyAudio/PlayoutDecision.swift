/// What the jitter buffer does each time it needs more audio: the decision logic of the
/// playout, a pure function of what it observes, so tests can state it case by case.
///
/// The buffer asks whenever the audio it has decoded will not fill the next playback
/// period (plus a few milliseconds kept for cross-fades). It then knows which frame is due
/// (the *next* frame, by sequence number), whether its packet is here, and how late it is
/// being taken (the *lead*: how long after the earliest time its packet could have arrived).
/// The lead is what decides whether packets are on time, and the target lead (from the
/// `DelayManager`) is what the buffer aims for.
public enum PlayoutOperation: Equatable, Sendable {
    /// Decode the next frame from its packet.
    case decode
    /// Decode it, then shorten the audio by up to `maximumSamples` per channel without
    /// changing its pitch, as far as `pace` allows.
    case accelerate(maximumSamples: Int, pace: AcceleratePace)
    /// Decode it, then lengthen the audio by a pitch period (up to `maximumSamples` in a
    /// quiet passage): the buffer is running too close to its packets' arrival. When it is
    /// only short of the room it keeps for repairs (FEC, redundant copies), not late,
    /// `quietOnly`: the room is made in a pause rather than in the middle of a word.
    case preemptiveExpand(maximumSamples: Int, quietOnly: Bool)
    /// The next frame's packet is lost and the one after it is here: rebuild the frame
    /// from the in-band FEC that one carries.
    case rebuildFromFEC
    /// The next frame is lost: conceal it (Opus PLC) for its duration.
    case conceal
    /// The next frame is lost, and the concealment played while the buffer was dry has
    /// already filled its time: count it concealed and move on.
    case skipConcealed
    /// Nothing to decode yet, but the next packet may still come in time: lengthen the
    /// audio already decoded by a pitch period or two rather than conceal.
    case stretchToWait
    /// Nothing to decode: conceal 10 ms while waiting, the frame still due (the delay grows).
    case concealWhileDry
    /// Nothing to decode, and the due frame is presumably lost: conceal 10 ms in its time
    /// (media time moves on, the delay does not grow). Its packet may still turn out to be
    /// late (it then plays after the concealment) or to start the sender's next words
    /// after a silence (the concealment was the silence).
    case concealInTime
    /// The sender is silent (DTX): comfort noise for 10 ms, media time moving on.
    case comfortNoise
    /// Not playing (before the first packet's time, or after the speaker stopped): silence.
    case waitInSilence
    /// The buffer has been dry so long that the speaker has stopped: play silence until
    /// packets return.
    case goQuiet
}

/// How hard `accelerate` may work: quiet passages are always fair game (a shorter pause
/// is not heard); speech is shortened only for a large excess, a pitch period at a time,
/// at most as often as the excess warrants.
public enum AcceleratePace: Equatable, Sendable {
    /// Only cut quiet audio.
    case quietOnly
    /// Also remove one pitch period from voiced speech.
    case voiced
    /// Remove several periods at once, accepting a less perfect match (a spike's backlog).
    case fast
    /// As `fast`, with longer cuts and a looser match: the audio plays later than the
    /// configured maximum delay (a stall longer than the room kept for it), and getting back
    /// under it matters more than the smoothness of the next few hundred milliseconds.
    case catchUp
}

public enum PlayoutDecision {
    /// The state of the next frame.
    public enum NextFrame: Equatable, Sendable {
        /// Its packet is here.
        case here
        /// Its packet is here and starts the sender's next words after a silence (its
        /// timestamp jumped while its sequence number did not: DTX), or the stream's first.
        case afterSilence
        /// Its packet is missing, the next one is here (with FEC for it, if the sender sends any).
        case rebuildable
        /// Its packet and the next one are missing; later ones are here.
        case missing
        /// No packet is here at all.
        case none
    }

    public struct Observation: Equatable, Sendable {
        public var next: NextFrame
        /// False before the stream's first frame plays and after the speaker stopped.
        public var playing = true
        /// Seconds between the earliest moment the next frame's packet could have arrived
        /// (its media time on the floor of the arrival delays) and now.
        public var lead: Double
        /// The lead to aim for: the jitter the packets show, plus a frame while the stream
        /// is losing packets and carries FEC.
        public var targetLead: Double
        /// The lead under which packets come too late: the target without the room for
        /// repairs. (Equal to `targetLead` unless the stream is losing packets.)
        public var safeLead: Double
        /// The arrival-delay quantile without margin, seconds (how late a packet may still come).
        public var jitter: Double
        /// Decoded audio not yet played, seconds.
        public var pending: Double
        /// Audio in the packets stored after the next frame without a gap, seconds: the
        /// backlog the buffer can shorten without running dry before more arrives.
        public var backlog: Double = 0
        /// The relative delay of the packet that arrived last, seconds: above the target
        /// lead, the packets are coming late right now (a spike still going on).
        public var latestDelay: Double = 0
        /// The duration of the next frame, seconds.
        public var frameSeconds: Double = 0.020
        /// The sender's last packet was DTX silence (the next frames are silence).
        public var senderSilent = false
        /// Concealment played since the buffer ran dry, seconds (0 while it is not dry).
        public var dryConcealed: Double = 0
        /// Audio added by `stretchToWait` since the next frame became due, seconds.
        public var waited: Double = 0
        /// Of `dryConcealed`, the part played in the due frames' time (`concealInTime`),
        /// seconds: frames found missing later are skipped against it.
        public var coveredInTime: Double = 0
        /// Seconds since the last time-stretch operation.
        public var sinceTimeStretch: Double = .infinity
        /// Seconds since the buffer last ran dry waiting for a late packet (the delay grew).
        public var sinceWaited: Double = .infinity
        /// The longest of the stream's recent dry spells that turned out to be loss (the
        /// packet after it came on time), seconds; 0 when the path has also held packets back
        /// lately (`DrySpellMemory`).
        public var lossSpell: Double = 0

        public init(next: NextFrame, lead: Double, targetLead: Double, safeLead: Double? = nil, jitter: Double, pending: Double) {
            self.next = next
            self.lead = lead
            self.targetLead = targetLead
            self.safeLead = safeLead ?? targetLead
            self.jitter = jitter
            self.pending = pending
        }
    }

    public struct Rules: Equatable, Sendable {
        /// The playback period (how often `read` is called), seconds.
        public var periodSeconds = 0.010
        /// Decoded audio kept pending at the end of each read, for cross-fades, seconds.
        public var reserveSeconds = 0.0025
        /// A lead this close under the target counts as on target.
        public var toleranceSeconds = 0.001
        /// Up to this excess delay only quiet passages are cut: a pause comes soon enough,
        /// and speech keeps its timing (unless the delay is above `maximumDelaySeconds`).
        public var gentleExcessSeconds = 0.020
        /// The delay the audio may play at, at most: above it, speech is shortened too.
        public var maximumDelaySeconds = 0.400
        /// Up to this excess voiced speech is shortened at most once per
        /// `steadyIntervalSeconds`; above it, every frame.
        public var steadyExcessSeconds = 0.050
        public var steadyIntervalSeconds = 0.040
        /// Above this excess, several periods at a time (a spike's backlog).
        public var fastExcessSeconds = 0.100
        /// The longest `stretchToWait` adds for one frame.
        public var maximumWaitSeconds = 0.040
        /// How much later than the jitter allows the packet after a missing one may still
        /// come and be waited for.
        public var lateAllowanceSeconds = 0.010
        /// Missing frames concealed in their time, in a row, before the buffer suspects the
        /// packets are held up rather than lost and lets the delay grow to wait for them;
        /// more where the path's recent dry spells were loss (`Observation.lossSpell`), up to
        /// `maximumLossSpellSeconds`.
        public var lossBurstFrames = 3
        /// A path that lost long bursts may still stall once: what the stall holds back
        /// beyond this much is waited for and played late, not dropped.
        public var maximumLossSpellSeconds = 0.400
        /// Dry this long (not in DTX), the speaker has stopped. A stalled path is not a
        /// speaker who stopped: Wi-Fi stalls on two hops at once hold packets for up to half a
        /// second, and going quiet in one throws away the buffer's timeline, so the words
        /// held up in it come back as a fresh start instead of being played out.
        public var idleAfterSeconds = 0.600
        /// A backlog above the maximum delay this soon after the buffer ran dry waiting for
        /// it is a stall's, and is caught up.
        public var stallMemorySeconds = 1.0
        public init() {}
    }

    static let sampleRate = Double(AudioClock.sampleRate)

    /// The delay above the target, seconds: how much the audio can be shortened while the
    /// frames to come are still taken at or after their target lead. Negative when the
    /// lead is under the target.
    ///
    /// Reads come every period, so a frame is taken at a lead on a grid one period apart.
    /// Pending audio beyond the reserve only adds delay: cutting it takes the next frame no
    /// sooner. Each period the lead is above the target can go too (each below it must be
    /// added) — but while the packets themselves come late (a spike still going on), only
    /// as far as packets already here cover: that lead is not a backlog, and shortening it
    /// would run the buffer dry.
    public static func excess(_ observation: Observation, _ rules: Rules) -> Double {
        let behind = (observation.targetLead - observation.lead - rules.toleranceSeconds) / rules.periodSeconds
        let periods = behind.rounded(.up)
        let trim = max(0, observation.pending - rules.reserveSeconds)
        let excess = trim - periods * rules.periodSeconds
        guard excess > 0, observation.latestDelay > observation.targetLead else { return excess }
        return min(excess, trim + observation.backlog)
    }

    public static func decide(_ observation: Observation, _ rules: Rules = Rules()) -> PlayoutOperation {
        let onTime = observation.lead >= observation.targetLead - rules.toleranceSeconds
        guard observation.playing else {
            switch observation.next {
            case .here, .afterSilence: return onTime ? .decode : .waitInSilence
            case .rebuildable, .missing, .none: return .waitInSilence
            }
        }
        switch observation.next {
        case .here:
            return adjusted(observation, rules)
        case .afterSilence:
            // The next words play at their time: comfort noise until then.
            return onTime ? adjusted(observation, rules) : .comfortNoise
        case .rebuildable:
            // Rebuilt even after a dry spell that made the delay grow (its own audio beats
            // the concealment already played), but not once its time was concealed.
            return observation.coveredInTime >= observation.frameSeconds ? .skipConcealed : .rebuildFromFEC
        case .missing:
            return observation.dryConcealed >= observation.frameSeconds ? .skipConcealed : .conceal
        case .none:
            if observation.senderSilent { return .comfortNoise }
            if observation.dryConcealed >= rules.idleAfterSeconds { return .goQuiet }
            // While the buffer keeps a frame of room for repairs, the packet after this one
            // would be here by now if it were coming: this frame is lost, not late. Conceal it
            // in its time, as if its loss were known, rather than shift the timing in
            // mid-word to wait. Only as long as a burst of loss lasts (three frames, or as
            // long as this path's recent dry spells that were loss): beyond, the packets are
            // more likely held up (a spike), and the delay must grow to keep them.
            let roomKept = observation.targetLead - observation.safeLead >= observation.frameSeconds / 2
                && observation.lead >= observation.targetLead - rules.toleranceSeconds
            if roomKept {
                let onlyInTime = observation.coveredInTime >= observation.dryConcealed - 1e-9
                // A frame more than the longest loss spell: the next one as long still ends in time.
                let lossSpell = observation.lossSpell > 0 ? observation.lossSpell + observation.frameSeconds : 0
                let burst = max(Double(rules.lossBurstFrames) * observation.frameSeconds, min(rules.maximumLossSpellSeconds, lossSpell))
                return onlyInTime && observation.coveredInTime < burst - 1e-9 ? .concealInTime : .concealWhileDry
            }
            // Otherwise the next packet (or the one after, with FEC) may still come: wait for
            // it by stretching, as long as it is not overdue and the stretch stays short.
            let nextOverdue = observation.lead >= observation.frameSeconds + observation.jitter + rules.lateAllowanceSeconds
            if observation.dryConcealed == 0, observation.waited < rules.maximumWaitSeconds, !nextOverdue {
                return .stretchToWait
            }
            return .concealWhileDry
        }
    }

    /// Decoding a frame that is here: plain, or with the delay moved towards the target.
    static func adjusted(_ observation: Observation, _ rules: Rules) -> PlayoutOperation {
        let excess = Self.excess(observation, rules)
        let samples = Int((abs(excess) * sampleRate).rounded(.down))
        if excess < 0 {
            let late = observation.lead < observation.safeLead - rules.toleranceSeconds
            return .preemptiveExpand(maximumSamples: max(samples, 1), quietOnly: !late)
        }
        guard samples > 0 else { return .decode }
        let tooLong = observation.lead + observation.pending > rules.maximumDelaySeconds
        if excess > rules.fastExcessSeconds {
            // Catching up is for a stall's backlog: the packets that come are still late, or
            // the buffer waited for them a moment ago. Audio that is late because the reads
            // were (a starved playback thread) is shortened at the usual pace.
            // Only above a target that is itself well under the maximum: on a path whose spread
            // needs about the maximum (jitter-40), the backlog is the path's own, and cutting it
            // at the loose pace cost words (envelope 0.86 → 0.75).
            let stalled = tooLong && observation.targetLead + rules.fastExcessSeconds < rules.maximumDelaySeconds
                && (observation.latestDelay > observation.targetLead || observation.sinceWaited < rules.stallMemorySeconds)
            return .accelerate(maximumSamples: samples, pace: stalled ? .catchUp : .fast)
        }
        if excess > rules.steadyExcessSeconds { return .accelerate(maximumSamples: samples, pace: .voiced) }
        let voicedDue = (excess > rules.gentleExcessSeconds || tooLong) && observation.sinceTimeStretch >= rules.steadyIntervalSeconds
        return .accelerate(maximumSamples: samples, pace: voicedDue ? .voiced : .quietOnly)
    }
}
