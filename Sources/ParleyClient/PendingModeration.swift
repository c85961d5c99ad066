import ParleyWire

/// A moderator's requests on their way to the relay: each is sent again, with its sequence
/// number, until the relay's answer names it or ``giveUpNanoseconds`` pass. Plain state with
/// time passed in; ``RelayLink`` keeps one and seals what it says is due.
struct PendingModeration {
    struct Request {
        let message: ControlMessage
        var nextSend: UInt64
        let giveUpAt: UInt64
    }

    static let resendNanoseconds: UInt64 = 250_000_000
    static let giveUpNanoseconds: UInt64 = 3_000_000_000
    /// Requests a person could have in flight at once; more are answered at once with a refusal.
    static let maximumOutstanding = 8

    private(set) var requests: [UInt32: Request] = [:]

    var isFull: Bool { requests.count >= Self.maximumOutstanding }

    mutating func add(_ message: ControlMessage, now: UInt64) {
        requests[message.sequence] = Request(message: message, nextSend: now &+ Self.resendNanoseconds, giveUpAt: now &+ Self.giveUpNanoseconds)
    }

    /// The request `sequence` was answered; false if it was not waiting (a repeated answer).
    mutating func answered(_ sequence: UInt32) -> Bool {
        requests.removeValue(forKey: sequence) != nil
    }

    /// What to send again at `now`, and the requests given up on.
    mutating func due(now: UInt64) -> (resend: [ControlMessage], expired: [UInt32]) {
        var resend: [ControlMessage] = []
        var expired: [UInt32] = []
        for (sequence, request) in requests {
            if now >= request.giveUpAt {
                expired.append(sequence)
                requests[sequence] = nil
            } else if now >= request.nextSend {
                resend.append(request.message)
                requests[sequence]!.nextSend = now &+ Self.resendNanoseconds
            }
        }
        return (resend, expired.sorted())
    }

    var nextDeadline: UInt64? { requests.values.map { min($0.nextSend, $0.giveUpAt) }.min() }

    /// Everything waiting is given up on (the link left the room): the sequences to answer.
    mutating func abandonAll() -> [UInt32] {
        defer { requests = [:] }
        return requests.keys.sorted()
    }
}
