import CoreMetrics
import ParleyWire

/// The text messages one member sends: each acted on once, within its rate, a repeat (its
/// answer was lost) answered as before. Plain state with time passed in; the member's loop
/// drives it (``MemberTable``). What the room sends the member is its leg's ``TextOutbox``.
struct MemberTexts: Sendable {
    /// Messages a member may send: a burst, then one every so often. A person types far
    /// slower; a script that floods the room is refused and counted.
    static let burst = 8
    static let perSecond = 2

    /// How the relay answered the member's last message, so a retransmission of it (its
    /// answer was lost) gets the same answer and is never relayed twice.
    enum Answer: Sendable, Equatable {
        case relayed
        case refused(TextOutcome, String)
    }

    private var rate: TokenBucket
    private(set) var lastAnswered: (number: UInt32, answer: Answer)?

    init(nowNanoseconds: UInt64) {
        rate = TokenBucket(ratePerSecond: Self.perSecond, burst: Self.burst, nowNanoseconds: nowNanoseconds)
    }

    /// What to do with a text the member sent: nil for a message older than its last (a
    /// stray retransmission: acknowledge, do nothing), the earlier answer for a repeat of
    /// its last, else a fresh decision (which the caller carries out).
    mutating func receive(_ message: ControlMessage.Text, nowNanoseconds now: UInt64) -> (answer: Answer, isRepeat: Bool)? {
        if let last = lastAnswered {
            if message.number == last.number { return (last.answer, true) }
            guard RoomSnapshot.isNewer(message.number, than: last.number) else { return nil }
        }
        let answer: Answer
        if let problem = ControlMessage.Text.problem(with: message.text) {
            let outcome: TextOutcome = message.text.utf8.count > ControlMessage.Text.maximumBytes ? .refusedTooLong : .refusedInvalid
            answer = .refused(outcome, problem)
        } else if !rate.allow(nowNanoseconds: now) {
            answer = .refused(.refusedRate, "more than \(Self.burst) messages in a few seconds; wait a moment and send it again")
        } else {
            answer = .relayed
        }
        lastAnswered = (message.number, answer)
        return (answer, false)
    }
}

/// What became of a text message a member sent, as `/metrics` counts it
/// (`parley_relay_text_messages_total{result}`).
enum TextOutcome: CaseIterable, Hashable, Sendable {
    /// Passed on to the room's other members.
    case relayed
    /// Over the member's rate.
    case refusedRate
    /// Longer than ``ControlMessage/Text/maximumBytes``.
    case refusedTooLong
    /// Empty, or holding control characters.
    case refusedInvalid
    /// Dropped unsent because a receiver's queue was full (counted once per receiver).
    case receiverQueueFull

    var label: String {
        switch self {
        case .relayed: return "relayed"
        case .refusedRate: return "refused_rate"
        case .refusedTooLong: return "refused_too_long"
        case .refusedInvalid: return "refused_invalid"
        case .receiverQueueFull: return "receiver_queue_full"
        }
    }

    static func counters(factory: some MetricsFactory) -> [TextOutcome: CoreMetrics.Counter] {
        Dictionary(uniqueKeysWithValues: allCases.map {
            ($0, CoreMetrics.Counter(label: "parley_relay_text_messages_total", dimensions: [("result", $0.label)], factory: factory))
        })
    }
}
