import CoreMetrics
import ParleyWire

/// One member's text messages at the relay: what it sends (each acted on once, within its
/// rate) and what the room sends it (delivered one at a time, in the room's order).
///
/// Plain state with time passed in; the session's loop drives it
/// (`RelayWorker+Room.swift`). Delivery is one message in flight: the next goes once the
/// member acknowledges the last (or ``ReliableSender`` gives it up), so a member receives
/// them in the order the room's lock put them, each once, whatever the path loses or
/// reorders. Text is rare enough that a round trip per message costs nothing a person sees.
struct MemberTexts: Sendable {
    /// Messages a member may send: a burst, then one every so often. A person types far
    /// slower; a script that floods the room is refused and counted.
    static let burst = 8
    static let perSecond = 2
    /// Messages waiting for a member: a room that writes faster than one member's link
    /// acknowledges loses the oldest beyond this, counted.
    static let maximumQueued = 64

    /// How the relay answered the member's last message, so a retransmission of it (its
    /// answer was lost) gets the same answer and is never relayed twice.
    enum Answer: Sendable, Equatable {
        case relayed
        case refused(TextOutcome, String)
    }

    private var rate: TokenBucket
    private(set) var lastAnswered: (number: UInt32, answer: Answer)?
    private var queue: [(sender: String, text: String)] = []
    private var nextNumber: UInt32 = 1
    /// The sequence number of the message in flight to the member.
    private(set) var inFlight: UInt32?

    init(nowNanoseconds: UInt64) {
        rate = TokenBucket(ratePerSecond: Self.perSecond, burst: Self.burst, nowNanoseconds: nowNanoseconds)
    }

    // MARK: From the member

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

    // MARK: To the member

    /// Queues a message from `sender`; false when the queue was full and its oldest was dropped.
    mutating func enqueue(sender: String, text: String) -> Bool {
        queue.append((sender, text))
        guard queue.count > Self.maximumQueued else { return true }
        queue.removeFirst()
        return false
    }

    /// The next message to send, numbered, if none is in flight; it is in flight with
    /// `sequence` from now on.
    mutating func next(sequence: UInt32) -> ControlMessage.Text? {
        guard inFlight == nil, !queue.isEmpty else { return nil }
        let (sender, text) = queue.removeFirst()
        defer { nextNumber &+= 1 }
        inFlight = sequence
        return ControlMessage.Text(number: nextNumber, sender: sender, text: text)
    }

    /// The message in flight is done with: acknowledged, or given up.
    mutating func settled() { inFlight = nil }

    var hasQueued: Bool { !queue.isEmpty }
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
