import ParleyWire

/// What this member tells the room besides audio, until the relay has it: its muted/deafened
/// state (the newest only), its text messages (each once, in order) and, in an end-to-end
/// encrypted room, its media keys sealed for the others (several at once, in any order). Plain state with
/// time passed in; ``RelayLink`` numbers, seals and sends what ``due(now:takeSequence:)``
/// returns, and reports the relay's acknowledgements and refusals back.
///
/// One message of each kind is in flight at a time and is sent again until acknowledged, a
/// fresh seal each time (the relay's replay window drops a datagram seen before, so an
/// identical copy would never be answered). The relay answers a repeat as it answered the
/// first, so a lost acknowledgement costs a retransmission, never a second delivery.
struct RoomOutbox {
    /// A new state goes out at most this often: a key held down, or a script flipping mute
    /// in a loop, makes a few messages a second, and the last state always follows.
    static let stateIntervalNanoseconds: UInt64 = 100_000_000
    /// Texts a member may send within ``textWindowNanoseconds``; stricter than the relay's
    /// budget, so what a client lets through the relay never refuses for speed.
    static let textsPerWindow = 5
    static let textWindowNanoseconds: UInt64 = 5_000_000_000
    /// Texts waiting behind the one in flight (the rate keeps it short).
    static let maximumQueuedTexts = 16

    private struct InFlight<Body> {
        var sequence: UInt32
        var body: Body
        var nextSend: UInt64
        var interval: UInt64
    }

    private let retransmitNanoseconds: UInt64
    private let maximumRetransmitNanoseconds: UInt64

    /// The state the person set.
    private(set) var state: ControlMessage.MemberState = []
    /// The state the relay acknowledged in this session.
    private var acknowledgedState: ControlMessage.MemberState = []
    private var stateRevision: UInt32 = 0
    private var stateInFlight: InFlight<ControlMessage.MemberStateUpdate>?
    private var lastStateSent: UInt64?

    private var queuedTexts: [String] = []
    private var textInFlight: InFlight<ControlMessage.Text>?
    private var nextTextNumber: UInt32 = 1
    /// When each of the texts accepted within the window was accepted.
    private var recentTexts: [UInt64] = []

    private var queuedKeys: [ControlMessage.MediaKeys] = []
    private var keysInFlight: [(flight: InFlight<ControlMessage.MediaKeys>, attemptsLeft: Int)] = []
    /// Media-key messages in flight at once: a rotation in a room of forty is ten of them,
    /// and none waits on another (each names its own recipients).
    static let keysInFlightAtOnce = 8
    /// Attempts before a media-key message is given up (the link notices a lost relay sooner).
    static let keyAttempts = 8
    /// Media-key messages waiting at most: a few rotations of a large room.
    static let maximumQueuedKeys = 256

    init(retransmitNanoseconds: UInt64, maximumRetransmitNanoseconds: UInt64) {
        self.retransmitNanoseconds = retransmitNanoseconds
        self.maximumRetransmitNanoseconds = maximumRetransmitNanoseconds
    }

    // MARK: What the person does

    mutating func setState(_ state: ControlMessage.MemberState) { self.state = state }

    /// Queues a text for the room, or says why it cannot go.
    mutating func say(_ text: String, now: UInt64) throws(TextRefusal) {
        if let problem = ControlMessage.Text.problem(with: text) { throw .invalid(problem) }
        recentTexts.removeAll { now &- $0 >= Self.textWindowNanoseconds }
        if recentTexts.count >= Self.textsPerWindow, let oldest = recentTexts.first {
            let wait = (Self.textWindowNanoseconds - (now &- oldest) + 999_999_999) / 1_000_000_000
            throw .tooFast("you sent \(Self.textsPerWindow) messages in the last \(Self.textWindowNanoseconds / 1_000_000_000) s; wait \(wait) s and send it again")
        }
        guard queuedTexts.count < Self.maximumQueuedTexts else {
            throw .tooFast("\(Self.maximumQueuedTexts) messages are still waiting for the relay; wait until they are through")
        }
        recentTexts.append(now)
        queuedTexts.append(text)
    }

    /// Queues sealed media keys for the relay to deliver; the oldest waiting go if the queue is full.
    mutating func send(_ keys: [ControlMessage.MediaKeys]) {
        queuedKeys += keys
        if queuedKeys.count > Self.maximumQueuedKeys { queuedKeys.removeFirst(queuedKeys.count - Self.maximumQueuedKeys) }
    }

    // MARK: The session

    /// A new session with the relay (a join or a rejoin): the relay knows nothing of this
    /// member's state, and the text in flight may never have reached it.
    mutating func sessionStarted() {
        acknowledgedState = []
        stateInFlight = nil
        lastStateSent = nil
        if let text = textInFlight?.body.text { queuedTexts.insert(text, at: 0) }
        textInFlight = nil
        // The old session's relay may never have had them: they go again, first.
        queuedKeys.insert(contentsOf: keysInFlight.map(\.flight.body), at: 0)
        keysInFlight = []
    }

    /// The messages to send now (new ones numbered with `takeSequence`, each reliable).
    mutating func due(now: UInt64, takeSequence: () -> UInt32) -> [ControlMessage] {
        var messages: [ControlMessage] = []
        let stateChanged = state != (stateInFlight?.body.state ?? acknowledgedState)
        if stateChanged, lastStateSent.map({ now &- $0 >= Self.stateIntervalNanoseconds }) ?? true {
            stateRevision &+= 1
            stateInFlight = InFlight(sequence: takeSequence(), body: .init(revision: stateRevision, state: state),
                                     nextSend: now, interval: retransmitNanoseconds)
            lastStateSent = now
        }
        if var flight = stateInFlight, flight.nextSend <= now {
            messages.append(ControlMessage(sequence: flight.sequence, isReliable: true, body: .memberState(flight.body)))
            backOff(&flight, now: now)
            stateInFlight = flight
        }
        if textInFlight == nil, !queuedTexts.isEmpty {
            let text = ControlMessage.Text(number: nextTextNumber, text: queuedTexts.removeFirst())
            nextTextNumber &+= 1
            textInFlight = InFlight(sequence: takeSequence(), body: text, nextSend: now, interval: retransmitNanoseconds)
        }
        if var flight = textInFlight, flight.nextSend <= now {
            messages.append(ControlMessage(sequence: flight.sequence, isReliable: true, body: .text(flight.body)))
            backOff(&flight, now: now)
            textInFlight = flight
        }
        while keysInFlight.count < Self.keysInFlightAtOnce, !queuedKeys.isEmpty {
            let flight = InFlight(sequence: takeSequence(), body: queuedKeys.removeFirst(), nextSend: now, interval: retransmitNanoseconds)
            keysInFlight.append((flight, Self.keyAttempts))
        }
        keysInFlight.removeAll { $0.attemptsLeft == 0 && $0.flight.nextSend <= now }
        for index in keysInFlight.indices where keysInFlight[index].flight.nextSend <= now {
            messages.append(ControlMessage(sequence: keysInFlight[index].flight.sequence, isReliable: true, body: .mediaKeys(keysInFlight[index].flight.body)))
            backOff(&keysInFlight[index].flight, now: now)
            keysInFlight[index].attemptsLeft -= 1
        }
        return messages
    }

    private func backOff<Body>(_ flight: inout InFlight<Body>, now: UInt64) {
        flight.nextSend = now + flight.interval
        flight.interval = min(flight.interval * 2, maximumRetransmitNanoseconds)
    }

    /// When ``due(now:takeSequence:)`` has something to send, if ever.
    var nextDeadline: UInt64? {
        var deadlines = [stateInFlight?.nextSend, textInFlight?.nextSend].compactMap { $0 } + keysInFlight.map(\.flight.nextSend)
        if !queuedKeys.isEmpty, keysInFlight.count < Self.keysInFlightAtOnce { deadlines.append(0) }
        if state != (stateInFlight?.body.state ?? acknowledgedState) {
            deadlines.append((lastStateSent ?? 0) &+ Self.stateIntervalNanoseconds)
        }
        if textInFlight == nil, !queuedTexts.isEmpty { deadlines.append(0) }
        return deadlines.min()
    }

    // MARK: The relay's answers

    /// The relay acknowledged `sequence`.
    mutating func acknowledge(sequence: UInt32) {
        if let flight = stateInFlight, flight.sequence == sequence {
            acknowledgedState = flight.body.state
            stateInFlight = nil
        }
        if let flight = textInFlight, flight.sequence == sequence { textInFlight = nil }
        keysInFlight.removeAll { $0.flight.sequence == sequence }
    }

    /// The relay refused the message with `sequence`: the text it was, if it was ours in flight.
    mutating func refuse(sequence: UInt32) -> String? {
        keysInFlight.removeAll { $0.flight.sequence == sequence }
        guard let flight = textInFlight, flight.sequence == sequence else { return nil }
        textInFlight = nil
        return flight.body.text
    }
}

/// Why a text was not sent, in words for the person who wrote it.
public enum TextRefusal: Error, Equatable, Sendable, CustomStringConvertible {
    /// Empty, too long, or not one line of plain text.
    case invalid(String)
    /// Over the rate.
    case tooFast(String)
    /// The call is not in the room (joining, reconnecting, ended).
    case notInRoom(String)

    public var description: String {
        switch self {
        case let .invalid(reason), let .tooFast(reason), let .notInRoom(reason): reason
        }
    }
}
