import ParleyBasics
import ParleyE2EE
import ParleyWire

/// A call's end-to-end encryption, on the network loop: which member may hold our media key
/// and which keys we hold of theirs; the packages that carry them (sealed with HPKE, through
/// the relay as a mailbox); the identity key pinned for each person; and the alarm when a
/// sender's view of the room is not ours.
///
/// ```
/// roster ─▶ verdicts (pins) ─▶ recipients ─▶ MediaKeySchedule ─▶ packages ─▶ RelayLink (mediaKeys)
/// mediaKeys ─▶ open (HPKE) ─▶ that sender's SenderKeyring ─▶ StreamDecryptor (RemoteSpeaker)
///                           └▶ its view of the room vs ours ─▶ alarm if it stays different
/// tick ─▶ a fresh key takes over ─▶ SendingKey (capture thread seals with it)
/// ```
///
/// Plain Swift with time passed in: the tests drive it with rosters and packages.
final class EndToEndSession {
    /// What is known of another member.
    struct Member {
        var identity: String
        var identityKey: [UInt8]
        var ssrc: UInt32
        var verdict: IdentityPins.Verdict
        /// It joined saying it takes part (its capability and a key).
        var takesPart: Bool

        var person: RoomView.Member { RoomView.Member(identity: identity, identityKey: identityKey) }
        /// Whether it is given our key and its frames are played.
        var isTrusted: Bool {
            guard takesPart else { return false }
            switch verdict {
            case .firstSeen, .known: return true
            case .changed, .unpinnable: return false
            }
        }
    }

    let identity: IdentityKey
    let room: String
    let sendingKey: SendingKey
    private let pinsPath: String?
    private var pins: IdentityPins
    private var schedule = MediaKeySchedule()
    private var publishedKeyID: UInt64?

    /// Our fingerprint, and each member key's fingerprint and safety number with us: hashes
    /// of keys that rarely change, for the status the loop publishes several times a second.
    private lazy var ownFingerprint = Fingerprint.of(identity.publicKeyBytes)
    private var shownKeys: [[UInt8]: (fingerprint: String, safetyNumber: String)] = [:]

    /// Our name and SSRC as the relay confirmed them.
    private(set) var selfName: String?
    private(set) var selfSSRC: UInt32?
    private(set) var members: [UInt32: Member] = [:]
    /// What opens each person's frames, kept across their SSRC changes and rejoins.
    private var keys: [RoomView.Member: MemberKeys] = [:]
    /// People no longer in the room, and when their keys are forgotten.
    private var leaving: [RoomView.Member: UInt64] = [:]
    /// Our views of the room, newest last: digest, size, and until when each was ours (nil: now).
    private var views: [(digest: [UInt8], count: Int, until: UInt64?)] = []
    /// Senders whose last package described a room we have not seen, since when.
    private var differing: [RoomView.Member: (digest: [UInt8], count: Int, since: UInt64)] = [:]
    /// Senders reported as seeing another room (the alarm stands until their view matches).
    private(set) var alarmed: [String: (theirCount: Int, ourCount: Int)] = [:]
    private var notices: [EndToEndNotice] = []
    /// The last roster's view of the room.
    private var lastView: RoomView?
    /// Packages that did not open or came from no trusted member: a relay's doing, or a bug.
    private(set) var rejectedPackages = 0
    /// Keys from a sender the roster does not name yet: a newcomer's keys often overtake the
    /// roster that announces it (the relay paces rosters, and sends the newcomer its own
    /// first). Kept until a roster names the sender, at most ``unplacedNanoseconds``.
    private var unplaced: [(entry: ControlMessage.MediaKeys.Entry, receivedAt: UInt64)] = []
    static let unplacedNanoseconds: UInt64 = 5_000_000_000
    static let maximumUnplaced = 64
    /// Keys from a member whose changed identity key is not accepted yet, kept unopened: if the
    /// person accepts the key, these are what lets us hear them (they sent them once, when the
    /// roster showed us). The newest few per member.
    private var refusedKeys: [RoomView.Member: [ControlMessage.MediaKeys.Entry]] = [:]
    static let maximumRefusedKeys = 8

    /// A view we held within this long still matches a package sealed against it.
    static let viewMemoryNanoseconds: UInt64 = 10_000_000_000
    /// A package describing another room is an alarm only if our view does not catch up
    /// within this (rosters and packages cross each other on the way).
    static let viewGraceNanoseconds: UInt64 = 3_000_000_000
    /// A person's keys are kept this long after they left: their last frames still play.
    static let departedKeyNanoseconds: UInt64 = SenderKeyring.retentionNanoseconds
    /// Byte budget of one media-keys message's entries: with the seal's overhead it fits the
    /// smallest datagram a relay may be set to accept (576 bytes).
    static let messageBudget = 480

    /// How often ``tick(now:)`` should run: a fresh key takes over within this of its time.
    static let tickNanoseconds: UInt64 = 100_000_000

    /// Starts sealing with a first key of our own at once (through `sendingKey`).
    init(identity: IdentityKey, room: String, pins: IdentityPins, pinsPath: String?, sendingKey: SendingKey) {
        self.identity = identity
        self.room = room
        self.pins = pins
        self.pinsPath = pinsPath
        self.sendingKey = sendingKey
        publish(schedule.current)
    }

    // MARK: The room

    /// The relay confirmed the join.
    func joined(identity name: String, ssrc: UInt32) {
        selfName = name
        selfSSRC = ssrc
    }

    /// A new roster: verdicts for new keys, our view of the room, and the packages it calls for.
    func rosterChanged(_ roster: [ControlMessage.Roster.Member], now: UInt64, wallSeconds: Int64) -> [ControlMessage.MediaKeys] {
        var next: [UInt32: Member] = [:]
        for entry in roster where entry.ssrc != selfSSRC {
            let takesPart = entry.capabilities.contains(.endToEndEncryption) && entry.identityKey.count == ControlMessage.identityKeySize
            var member = Member(identity: entry.identity, identityKey: entry.identityKey, ssrc: entry.ssrc, verdict: .unpinnable, takesPart: takesPart)
            if let known = members[entry.ssrc], known.identity == entry.identity, known.identityKey == entry.identityKey {
                member.verdict = known.verdict
            } else if takesPart {
                member.verdict = pins.check(room: room, identity: entry.identity, key: entry.identityKey, now: wallSeconds)
                if case .changed = member.verdict { notices.append(.keyChanged(identity: entry.identity)) }
            } else {
                notices.append(.cannotTakePart(identity: entry.identity))
            }
            next[entry.ssrc] = member
        }
        members = next
        savePins()
        let waiting = unplaced
        unplaced = []
        for (entry, receivedAt) in waiting where now &- receivedAt < Self.unplacedNanoseconds {
            received(entry, now: now, receivedAt: receivedAt)
        }

        let present = Set(members.values.map(\.person))
        for person in keys.keys where !present.contains(person) && leaving[person] == nil {
            leaving[person] = now &+ Self.departedKeyNanoseconds
        }
        for person in present { leaving.removeValue(forKey: person) }

        // Our view: everyone the roster shows, ourselves included, with the keys it shows.
        let view = RoomView(room: room, members: roster.map { RoomView.Member(identity: $0.identity, identityKey: $0.identityKey) })
        lastView = view
        if views.last?.digest != view.digest {
            if !views.isEmpty { views[views.count - 1].until = now }
            views.append((view.digest, view.members.count, nil))
            views.removeAll { $0.until.map { now &- $0 > Self.viewMemoryNanoseconds } ?? false }
        }
        return send(schedule.recipientsChanged(to: recipients, now: now), view: view)
    }

    /// The person accepted a member's changed key (`parley ctl trust`): it is pinned, and the
    /// member is given our key. Returns the packages, or nil when no member has that name.
    func accept(identity name: String, now: UInt64, wallSeconds: Int64) -> [ControlMessage.MediaKeys]? {
        guard let (ssrc, member) = members.first(where: { $0.value.identity == name }), member.takesPart else { return nil }
        pins.accept(room: room, identity: name, key: member.identityKey, now: wallSeconds)
        members[ssrc]?.verdict = .known(since: wallSeconds)
        savePins()
        notices.append(.keyAccepted(identity: name))
        for entry in refusedKeys.removeValue(forKey: member.person) ?? [] { received(entry, now: now, receivedAt: now) }
        guard let lastView else { return [] }
        return send(schedule.recipientsChanged(to: recipients, now: now), view: lastView)
    }

    private var recipients: [MediaKeySchedule.Recipient] {
        members.values.filter(\.isTrusted).sorted { $0.ssrc < $1.ssrc }
            .map { MediaKeySchedule.Recipient(identity: $0.identity, identityKey: $0.identityKey, ssrc: $0.ssrc) }
    }

    // MARK: Packages

    /// Seals each delivery and packs them into messages under the byte budget.
    private func send(_ deliveries: [MediaKeySchedule.Delivery], view: RoomView) -> [ControlMessage.MediaKeys] {
        publish(schedule.current)
        guard let selfName, !deliveries.isEmpty else { return [] }
        var messages: [ControlMessage.MediaKeys] = []
        var entries: [ControlMessage.MediaKeys.Entry] = []
        var used = 0
        for delivery in deliveries {
            let package = MediaKeyPackage(
                keyID: delivery.key.id.keyID, baseKey: delivery.key.baseKey, memberCount: UInt16(clamping: view.members.count),
                roomViewDigest: view.digest)
            guard let sealed = try? SealedMediaKey.seal(
                package, to: delivery.recipient.identityKey, recipient: delivery.recipient.identity, from: identity, senderName: selfName,
                room: room) else { continue }
            let size = 4 + 2 + sealed.count
            if !entries.isEmpty && (used + size > Self.messageBudget || entries.count == ControlMessage.MediaKeys.maximumEntries) {
                messages.append(ControlMessage.MediaKeys(entries: entries))
                entries = []
                used = 0
            }
            entries.append(.init(ssrc: delivery.recipient.ssrc, package: sealed))
            used += size
        }
        if !entries.isEmpty { messages.append(ControlMessage.MediaKeys(entries: entries)) }
        return messages
    }

    /// Keys other members sent us, through the relay: each entry names its sender.
    func received(_ message: ControlMessage.MediaKeys, now: UInt64) {
        for entry in message.entries { received(entry, now: now, receivedAt: now) }
    }

    private func received(_ entry: ControlMessage.MediaKeys.Entry, now: UInt64, receivedAt: UInt64) {
        guard let sender = members[entry.ssrc] else {
            if unplaced.count >= Self.maximumUnplaced { unplaced.removeFirst() }
            unplaced.append((entry, receivedAt))
            return
        }
        if sender.takesPart, case .changed = sender.verdict {
            var kept = refusedKeys[sender.person, default: []]
            if kept.count >= Self.maximumRefusedKeys { kept.removeFirst() }
            kept.append(entry)
            refusedKeys[sender.person] = kept
            return
        }
        let memberKeys = keysOf(sender.person)
        guard let selfName, sender.isTrusted, memberKeys.mayOpenPackage(now: now), let package = try? SealedMediaKey.open(
            entry.package, by: identity, recipientName: selfName, from: sender.identityKey, senderName: sender.identity, room: room)
        else {
            rejectedPackages += 1
            return
        }
        memberKeys.keyring.install(MediaKey(id: MediaKeyID(keyID: package.keyID), baseKey: package.baseKey), now: now)
        memberKeys.keysArrived()
        checkView(of: sender, digest: package.roomViewDigest, count: Int(package.memberCount), now: now)
    }

    private func keysOf(_ person: RoomView.Member) -> MemberKeys {
        if let existing = keys[person] { return existing }
        let made = MemberKeys()
        keys[person] = made
        return made
    }

    /// What opens the frames of the stream `ssrc`, or nil when it is no trusted member's.
    func keys(forStream ssrc: UInt32) -> MemberKeys? {
        guard let member = members[ssrc], member.isTrusted else { return nil }
        return keysOf(member.person)
    }

    // MARK: Views of the room

    private func checkView(of sender: Member, digest: [UInt8], count: Int, now: UInt64) {
        let matches = views.contains { $0.digest == digest && ($0.until.map { now &- $0 <= Self.viewMemoryNanoseconds } ?? true) }
        if matches {
            differing.removeValue(forKey: sender.person)
            if alarmed.removeValue(forKey: sender.identity) != nil { notices.append(.viewAgrees(identity: sender.identity)) }
        } else if differing[sender.person]?.digest != digest {
            differing[sender.person] = (digest, count, differing[sender.person]?.since ?? now)
        }
    }

    // MARK: Time

    /// Switches to a fresh key when its time comes, forgets keys of those long gone, and raises
    /// the alarm for views that stayed different. Call it every few hundred milliseconds.
    func tick(now: UInt64) {
        if let next = schedule.tick(now: now) { publish(next) }
        for memberKeys in keys.values { memberKeys.keyring.expire(now: now) }
        for (person, until) in leaving where now >= until {
            keys.removeValue(forKey: person)
            leaving.removeValue(forKey: person)
            differing.removeValue(forKey: person)
            refusedKeys.removeValue(forKey: person)
        }
        let ourCount = views.last?.count ?? 0
        for (person, difference) in differing where now &- difference.since >= Self.viewGraceNanoseconds {
            // Our roster caught up with theirs meanwhile (and may have moved on since).
            if views.contains(where: { $0.digest == difference.digest }) {
                differing.removeValue(forKey: person)
                continue
            }
            if alarmed[person.identity] == nil {
                alarmed[person.identity] = (difference.count, ourCount)
                notices.append(.viewDiffers(identity: person.identity, theirCount: difference.count, ourCount: ourCount))
            }
        }
    }

    /// What the person should be told since the last call.
    func takeNotices() -> [EndToEndNotice] {
        defer { notices = [] }
        return notices
    }

    private func publish(_ key: MediaKey) {
        guard publishedKeyID != key.id.keyID else { return }
        publishedKeyID = key.id.keyID
        sendingKey.use(.sealed(key.frameKey()))
    }

    private func savePins() {
        guard let pinsPath else { return }
        try? pins.save(path: pinsPath)
    }

    // MARK: Figures

    /// The key we seal with now.
    var currentKeyID: MediaKeyID { schedule.current.id }

    /// Every key this member was given by the others, and its own current and pending one.
    var heldKeys: [MediaKey] {
        keys.values.flatMap(\.keyring.heldKeys) + [schedule.current] + (schedule.pending.map { [$0.key] } ?? [])
    }

    /// Whether we hold a key of this member's.
    func holdsKey(of member: Member) -> Bool { keys[member.person].map { !$0.keyring.isEmpty } ?? false }

    /// A member key's fingerprint and its safety number with ours, worked out once per key.
    private func shownKey(_ key: [UInt8]) -> (fingerprint: String, safetyNumber: String) {
        if let known = shownKeys[key] { return known }
        // Keys of people long gone are not kept for ever: a room's worth is plenty.
        if shownKeys.count >= 256 { shownKeys.removeAll() }
        let shown = (Fingerprint.of(key), Fingerprint.safetyNumber(identity.publicKeyBytes, key))
        shownKeys[key] = shown
        return shown
    }

    /// What the status line, `parley ctl status` and `parley ctl verify` show.
    func status() -> EndToEndStatus {
        let people = members.values.sorted { ($0.identity, $0.ssrc) < ($1.identity, $1.ssrc) }.map { member in
            let shown = member.takesPart ? shownKey(member.identityKey) : nil
            return EndToEndStatus.Member(
                identity: member.identity, fingerprint: shown?.fingerprint, safetyNumber: shown?.safetyNumber,
                key: EndToEndStatus.KeyState(member), holdsOurKey: member.isTrusted, weHoldTheirs: holdsKey(of: member),
                seesAnotherRoom: alarmed[member.identity].map { "gave their key to a room of \($0.theirCount) where you see \($0.ourCount)" })
        }
        return EndToEndStatus(
            ownFingerprint: ownFingerprint, keyID: schedule.current.id.description,
            members: people, rejectedPackages: rejectedPackages)
    }
}

/// Something about end-to-end keys a person must be told.
public enum EndToEndNotice: Sendable, Equatable {
    /// A member's key is not the one pinned: refused until accepted.
    case keyChanged(identity: String)
    /// A member's key was accepted after a change.
    case keyAccepted(identity: String)
    /// A member gave its key to a room other than the one we see.
    case viewDiffers(identity: String, theirCount: Int, ourCount: Int)
    /// A member's view came to match ours again.
    case viewAgrees(identity: String)
    /// A member in the roster cannot take part (an older client the relay let in).
    case cannotTakePart(identity: String)
}

/// The end-to-end encryption of a call as people see it.
public struct EndToEndStatus: Sendable, Equatable, Codable {
    public enum KeyState: String, Sendable, Equatable, Codable {
        /// Met for the first time in this room: pinned now.
        case new
        /// The key pinned earlier.
        case known
        /// Not the key pinned: refused until accepted (`parley ctl trust NAME`).
        case changed
        /// Takes no part in end-to-end encryption: hears nothing, and nothing of it plays.
        case none

        init(_ member: EndToEndSession.Member) {
            guard member.takesPart else {
                self = .none
                return
            }
            switch member.verdict {
            case .firstSeen: self = .new
            case .known: self = .known
            case .changed, .unpinnable: self = .changed
            }
        }
    }

    public struct Member: Sendable, Equatable, Codable {
        public var identity: String
        /// Eight hex digits of their identity key ("3f9a c21e").
        public var fingerprint: String?
        /// The safety number of their key and ours, to read aloud to each other.
        public var safetyNumber: String?
        public var key: KeyState
        /// We give them our media key.
        public var holdsOurKey: Bool
        /// They gave us theirs.
        public var weHoldTheirs: Bool
        /// Set when the keys they sent describe a room other than ours: the alarm, in words.
        public var seesAnotherRoom: String?
    }

    /// Our own identity's fingerprint.
    public var ownFingerprint: String
    /// The key we seal with now (epoch.generation).
    public var keyID: String
    public var members: [Member]
    /// Sealed keys that did not open or came from no trusted member.
    public var rejectedPackages: Int
}

/// One person's keys as this client holds them: their keyring, and a budget on the packages
/// we open for them (each costs two Diffie-Hellmans: a flood of forged ones from a hostile
/// relay must not take the network loop). Shared by the session, which installs keys, and the
/// stream's ``StreamDecryptor``, which opens frames with them; both on the network loop.
final class MemberKeys {
    var keyring = SenderKeyring()
    /// Bumped each time keys arrive, so a stream tries the packets it held back.
    private(set) var arrivals = 0
    private var windowStart: UInt64 = 0
    private var openedInWindow = 0

    /// Packages opened per person per second at most: a rotation sends one, a churning room a
    /// few a second.
    static let packagesPerSecond = 20

    func mayOpenPackage(now: UInt64) -> Bool {
        if now &- windowStart >= 1_000_000_000 {
            windowStart = now
            openedInWindow = 0
        }
        openedInWindow += 1
        return openedInWindow <= Self.packagesPerSecond
    }

    func keysArrived() { arrivals &+= 1 }
}
