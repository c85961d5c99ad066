/// What a stream's dry spells turned out to be, so the jitter buffer knows how long to
/// conceal a missing frame in its time before it takes the silence for a stall.
///
/// While nothing arrives the buffer cannot tell loss from delay: a burst of lost packets
/// and a path that holds packets back look the same until the next packet comes. Then it
/// can: after a burst of loss the next packet comes on time (its delay within the path's
/// jitter), after a stall it comes late. A lost stretch concealed in its time leaves the
/// words after it where they were; taken for a stall, the buffer waits, every word after it
/// plays late, and the delay has to be cut out of the speech again, in mid-sentence.
///
/// So the memory keeps the longest loss spells (dry spells that ended in an on-time packet,
/// or gaps in the sequence numbers longer than the room kept for copies) over the talker's
/// recent speech, and when a packet last came late. A path seen to stall within the memory
/// gets no allowance beyond the buffer's rule: its held-up words are worth waiting for.
///
/// Plain Swift with times passed in (the buffer's talk time); fixed storage, no allocation.
struct DrySpellMemory: Sendable {
    /// Loss spells remembered (the newest replace the oldest).
    static let capacity = 8

    private var lengths = [Double](repeating: 0, count: capacity)
    private var times = [Double](repeating: -.infinity, count: capacity)
    private var newest = 0
    private var lastStall = -Double.infinity

    /// A dry spell of `seconds` ended with a packet on time at `time`: the packets were lost.
    mutating func recordLoss(seconds: Double, at time: Double) {
        guard seconds.isFinite, seconds > 0 else { return }
        newest = (newest + 1) % Self.capacity
        lengths[newest] = seconds
        times[newest] = time
    }

    /// A packet came late after a dry spell, or far later than the path's jitter: the path
    /// holds packets back.
    mutating func recordStall(at time: Double) {
        lastStall = time
    }

    /// The longest loss spell within `memory` seconds before `now`; 0 when the path stalled
    /// within that time, or lost nothing in a dry spell.
    func longestLoss(now: Double, memory: Double) -> Double {
        guard now - lastStall > memory else { return 0 }
        var longest = 0.0
        for index in 0..<Self.capacity where now - times[index] <= memory {
            longest = max(longest, lengths[index])
        }
        return longest
    }

    mutating func reset() {
        self = DrySpellMemory()
    }
}
