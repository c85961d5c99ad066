/// When this member's media key changes, and which key each other member is given: plain
/// state with time passed in, owned by the network loop.
///
/// - **Someone left** (or their key changed): a fresh epoch (random key), sealed to those
///   still here only, and used from ``switchDelayNanoseconds`` later, once it has had time to
///   reach them; the key that left with the departed member seals nothing after that.
/// - **Someone joined**: every member is given the next generation of the key (its ratchet),
///   the newcomer included, and it is used at once: the others derive it themselves, and the
///   newcomer cannot derive the generation before, so it opens nothing said before it came.
///   An epoch out of generations starts a fresh one instead, used after the delay.
///
/// - **Someone came back** (the same person and identity key in a new session: a client that
///   restarted, and so holds no key): given the keys in use again, nothing changes for the rest.
///
/// Every change sends every member a package, not only the newcomer: each package also
/// carries the sender's view of the room, which is how the others notice a member the relay
/// shows to some of them only (``RoomView``).
public struct MediaKeySchedule {
    /// Another member, as far as keys go: who (name and identity key) and where the relay
    /// delivers to (its SSRC).
    public struct Recipient: Sendable, Hashable {
        public var identity: String
        public var identityKey: [UInt8]
        public var ssrc: UInt32

        public init(identity: String, identityKey: [UInt8], ssrc: UInt32) {
            self.identity = identity
            self.identityKey = identityKey
            self.ssrc = ssrc
        }

        var person: RoomView.Member { RoomView.Member(identity: identity, identityKey: identityKey) }
    }

    public struct Delivery: Sendable, Equatable {
        public var recipient: Recipient
        public var key: MediaKey
    }

    /// The key frames are sealed with now.
    public private(set) var current: MediaKey
    /// A fresh epoch on its way to the members, and when it takes over.
    public private(set) var pending: (key: MediaKey, switchAt: UInt64)?
    /// Who holds our keys, and the SSRC of the session that got them.
    private var holders: [RoomView.Member: UInt32] = [:]
    private var nextEpoch: UInt64

    /// Between sealing a fresh key to the members and using it: time for the packages to
    /// cross the relay (retransmitted if lost) before the first frame under it arrives, and
    /// short enough that a member who left is shut out within a second of the relay's roster.
    /// Frames that still overtake their key wait for it at the listener (``CallReceiver``).
    public static let switchDelayNanoseconds: UInt64 = 300_000_000

    public init() {
        current = MediaKey.fresh(epoch: 0)
        nextEpoch = 1
    }

    /// The members other than us who may hold our key are now `recipients`: returns the
    /// packages to seal and send. A departure wins over a join made at the same time.
    public mutating func recipientsChanged(to recipients: [Recipient], now: UInt64) -> [Delivery] {
        let people = Set(recipients.map(\.person))
        let departed = !Set(holders.keys).subtracting(people).isEmpty
        let joined = !people.subtracting(holders.keys).isEmpty
        let returned = recipients.filter { recipient in holders[recipient.person].map { $0 != recipient.ssrc } ?? false }
        holders = Dictionary(recipients.map { ($0.person, $0.ssrc) }, uniquingKeysWith: { $1 })
        if departed {
            let fresh = takeFreshKey()
            pending = (fresh, now &+ Self.switchDelayNanoseconds)
            return recipients.map { Delivery(recipient: $0, key: fresh) }
        }
        guard joined else {
            // A new session of someone who had our keys: the keys in use again, to it alone.
            return returned.flatMap { person in ([current] + (pending.map { [$0.key] } ?? [])).map { Delivery(recipient: person, key: $0) } }
        }
        if let waiting = pending {
            // The newcomer is given the epoch about to take over, one generation on.
            let next = waiting.key.ratcheted() ?? takeFreshKey()
            pending = (next, waiting.switchAt)
            return recipients.map { Delivery(recipient: $0, key: next) }
        }
        if let next = current.ratcheted() {
            current = next
            return recipients.map { Delivery(recipient: $0, key: next) }
        }
        let fresh = takeFreshKey()
        pending = (fresh, now &+ Self.switchDelayNanoseconds)
        return recipients.map { Delivery(recipient: $0, key: fresh) }
    }

    /// The key to seal with from now, when a pending one takes over at `now`; else nil.
    public mutating func tick(now: UInt64) -> MediaKey? {
        guard let waiting = pending, now >= waiting.switchAt else { return nil }
        pending = nil
        current = waiting.key
        return current
    }

    private mutating func takeFreshKey() -> MediaKey {
        defer { nextEpoch += 1 }
        return MediaKey.fresh(epoch: nextEpoch)
    }
}
