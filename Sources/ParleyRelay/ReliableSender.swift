/// The relay's side of reliable control messages (roster, goodbye, text): each is sent, then sent
/// again every ``retransmitInterval`` until the client acknowledges its sequence number or
/// the attempts run out. A newer roster supersedes any unacknowledged older one, so a client
/// that was unreachable for a while gets the current room, not its history.
///
/// Plain state with time passed in; the session's event loop calls ``due(nowNanoseconds:)``
/// on each tick and sends what it returns.
struct ReliableSender: Sendable {
    static let retransmitIntervalNanoseconds: UInt64 = 200_000_000
    /// 10 attempts over 2 s: a client that hears none of them has lost its network, and the
    /// idle timeout will notice.
    static let maximumAttempts = 10

    enum Kind: Sendable, Hashable {
        case roster(version: UInt32)
        case goodbye
        /// A member's text message to this member (``MemberTexts``), or over a trunk: never superseded.
        case text
        /// A moderation passed on to another relay of the room, over a trunk.
        case moderation
        /// Sealed media keys for the member, or for members behind a trunk: never superseded.
        case mediaKeys
    }

    struct Message: Sendable {
        let sequence: UInt32
        let kind: Kind
        let bytes: [UInt8]
        var nextSendNanoseconds: UInt64
        var attemptsLeft: Int
    }

    private(set) var outstanding: [Message] = []

    var isEmpty: Bool { outstanding.isEmpty }

    /// How many messages of `kind` wait for their acknowledgement.
    func count(of kind: Kind) -> Int { outstanding.reduce(0) { $0 + ($1.kind == kind ? 1 : 0) } }

    /// Queues a message to be sent now and retransmitted; returns its bytes for the first send.
    mutating func enqueue(sequence: UInt32, kind: Kind, bytes: [UInt8], nowNanoseconds: UInt64, attempts: Int = maximumAttempts) {
        if case let .roster(version) = kind {
            outstanding.removeAll { message in
                if case let .roster(older) = message.kind { return older < version }
                return false
            }
        }
        outstanding.append(Message(sequence: sequence, kind: kind, bytes: bytes,
                                   nextSendNanoseconds: nowNanoseconds + Self.retransmitIntervalNanoseconds,
                                   attemptsLeft: attempts - 1))
    }

    /// Forgets the message with this sequence number; false if none was outstanding.
    @discardableResult
    mutating func acknowledge(sequence: UInt32) -> Bool {
        guard let index = outstanding.firstIndex(where: { $0.sequence == sequence }) else { return false }
        outstanding.remove(at: index)
        return true
    }

    /// The messages to send again now. A message whose last attempt went unanswered for one
    /// more interval is given up.
    mutating func due(nowNanoseconds: UInt64) -> [[UInt8]] {
        guard !outstanding.isEmpty else { return [] }  // the common case, on every tick
        outstanding.removeAll { $0.attemptsLeft == 0 && $0.nextSendNanoseconds <= nowNanoseconds }
        var resend: [[UInt8]] = []
        for index in outstanding.indices where outstanding[index].nextSendNanoseconds <= nowNanoseconds {
            resend.append(outstanding[index].bytes)
            outstanding[index].attemptsLeft -= 1
            outstanding[index].nextSendNanoseconds = nowNanoseconds + Self.retransmitIntervalNanoseconds
        }
        return resend
    }
}
