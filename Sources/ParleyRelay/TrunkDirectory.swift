import Crypto
import NIOCore
import ParleyBasics
import ParleyDatagrams
import ParleySecurity
import ParleyWire
import Synchronization

/// What every loop shares about trunks: the trusted relays' keys, the openings in progress,
/// which trunks exist (and on which loop), and where their events go.
///
/// Behind one lock, taken by trunk handshakes, opening and closing, and the API, never by a
/// packet once its trunk is open: an open trunk is found in its loop's own table. An opening
/// is shared because its answers may arrive on any loop: the kernel steers the peer's
/// datagrams to the socket its address hashes to, which need not be the one the hello left
/// from; the trunk then lives on the loop that received the response.
final class TrunkDirectory: Sendable {
    let relayKey: RelayKey

    private struct Opening {
        let room: String
        let peer: RelayPeer
        let destination: DatagramAddress
        var opener: TrunkOpener
        /// The hello until the cookie comes, then the init.
        var pendingSend: [UInt8]
        var nextSendNanoseconds: UInt64
        let deadlineNanoseconds: UInt64
    }

    struct Record: Sendable {
        /// Its `let`s only may be read off its loop.
        let trunk: TrunkLeg
        let trunkID: UInt64
        let workerIndex: Int
        let route: TrunkRoute
        let peer: RelayPeer
        let openedHere: Bool
    }

    private struct Key: Hashable {
        let room: String
        let peerKey: [UInt8]
    }

    private struct State {
        var trusted: Set<[UInt8]> = []
        /// The hosts the trusted relays are registered at: a trunk init from any other source
        /// is dropped before it costs a Diffie-Hellman.
        var trustedHosts: Set<SourceHost> = []
        /// Openings from here that failed in a row, by room and peer, and when the last did.
        var failures: [Key: (count: Int, at: UInt64)] = [:]
        /// Keys taken out of the trusted set, and when: their open trunks close after a grace.
        var distrustedSince: [[UInt8]: UInt64] = [:]
        var openings: [Opening] = []
        /// The latest cookie each peer gave this relay's address, and when: a cookie names the
        /// address, not the hello, so openings to one peer within its life need no hello.
        var cookies: [HostAndPort: (cookie: HandshakeCookie, receivedNanoseconds: UInt64)] = [:]
        var trunks: [Key: Record] = [:]
        var timings = TrunkTimings()
        var handler: (@Sendable (TrunkEvent) -> Void)?
    }

    private let state = Mutex(State())

    init(relayKey: RelayKey) {
        self.relayKey = relayKey
    }

    var localKeyBytes: [UInt8] { Array(relayKey.publicKey.rawRepresentation) }

    // MARK: Settings

    func setTrusted(_ peers: [RelayPeer], now: UInt64 = MonotonicClock.now()) {
        state.withLock { state in
            let trusted = Set(peers.map(\.publicKey))
            for key in state.trusted.subtracting(trusted) where state.distrustedSince[key] == nil { state.distrustedSince[key] = now }
            for key in trusted { state.distrustedSince[key] = nil }
            state.trusted = trusted
            state.trustedHosts = Set(peers.flatMap(Self.hosts))
        }
    }

    /// Whether a trunk init from `host` may cost this relay a Diffie-Hellman: only when a
    /// trusted relay is registered there. A stranger gets address cookies as anyone does, but
    /// its trunk inits end here, so a relay that trusts no relay spends nothing on them.
    func acceptsTrunkInit(from host: SourceHost) -> Bool {
        state.withLock { $0.trustedHosts.contains(host) }
    }

    /// The sources a relay's datagrams can come from: its registered address, and that address
    /// as a dual-stack socket reports an IPv4 peer (::ffff:a.b.c.d).
    private static func hosts(of peer: RelayPeer) -> [SourceHost] {
        var addresses = [try? peer.address.socketAddress()]
        if !peer.address.host.contains(":") {
            addresses.append(try? SocketAddress(ipAddress: "::ffff:" + peer.address.host, port: peer.address.port))
        }
        return addresses.compactMap { $0.flatMap(PeerAddress.init)?.host }
    }

    /// Keys out of the trusted set for longer than `grace`; their trunks are to be closed.
    /// (Empty, and one lock, on every tick of a relay whose trusted set did not shrink.)
    func keysDistrusted(longerThan grace: UInt64, now: UInt64) -> Set<[UInt8]> {
        state.withLock { state in
            guard !state.distrustedSince.isEmpty else { return [] }
            return Set(state.distrustedSince.compactMap { now &- $0.value > grace ? $0.key : nil })
        }
    }

    func isTrusted(_ key: Curve25519.KeyAgreement.PublicKey) -> Bool {
        let bytes = Array(key.rawRepresentation)
        return state.withLock { $0.trusted.contains(bytes) }
    }

    var timings: TrunkTimings {
        get { state.withLock { $0.timings } }
        set { state.withLock { $0.timings = newValue } }
    }

    func setHandler(_ handler: (@Sendable (TrunkEvent) -> Void)?) {
        state.withLock { $0.handler = handler }
    }

    /// Hands `event` to the handler, outside the lock.
    func emit(_ event: TrunkEvent) {
        let handler = state.withLock { state in
            let key = Key(room: event.room, peerKey: event.peer.publicKey)
            switch event.change {
            case .opened:
                state.failures[key] = nil
            case .ended(.unanswered), .ended(.refused), .ended(.keyMismatch):
                guard event.openedHere else { break }
                let now = MonotonicClock.now()
                if state.failures.count >= 4_096 {  // bounded: forget failures a backoff no longer holds
                    state.failures = state.failures.filter { now &- $0.value.at < 60_000_000_000 }
                }
                if state.failures.count < 4_096 || state.failures[key] != nil {
                    state.failures[key] = ((state.failures[key]?.count ?? 0) + 1, now)
                }
            case .ended:
                break
            }
            return state.handler
        }
        handler?(event)
    }

    /// Whether a plan may open `room`'s trunk to `peer` again now: after openings that failed
    /// in a row it waits 1, 2, 4 … up to 30 s, so a peer that keeps refusing (or is down) is
    /// not asked twice a second. Opening through the API is never held back.
    func mayOpenAgain(room: String, peerKey: [UInt8], now: UInt64) -> Bool {
        state.withLock { state in
            guard let failure = state.failures[Key(room: room, peerKey: peerKey)] else { return true }
            let wait = min(30_000_000_000, UInt64(1_000_000_000) << UInt64(min(failure.count - 1, 5)))
            return now &- failure.at >= wait
        }
    }

    // MARK: Opening (this relay opens)

    /// Starts opening `room`'s trunk to `peer`: returns the hello (or, with a cookie from
    /// the peer in hand, the init) to send; nil when the trunk is open or being opened already,
    /// or a hello to the peer is already waiting for its cookie.
    func beginOpening(room: String, peer: RelayPeer, destination: DatagramAddress, now: UInt64) -> [UInt8]? {
        state.withLock { state in
            let key = Key(room: room, peerKey: peer.publicKey)
            guard state.trunks[key] == nil, !state.openings.contains(where: { $0.room == room && $0.peer.publicKey == peer.publicKey }) else {
                return nil
            }
            var opening = Opening(
                room: room, peer: peer, destination: destination, opener: TrunkOpener(relayKey: relayKey, peerPublicKey: peer.key), pendingSend: [],
                nextSendNanoseconds: now &+ state.timings.openingRetransmit, deadlineNanoseconds: now &+ state.timings.openingTimeout)
            opening.pendingSend = opening.opener.helloBytes
            if let cached = state.cookies[peer.address], now &- cached.receivedNanoseconds < Self.cookieReuseNanoseconds,
               let payload = try? TrunkOpening(room: room).serialized(), let initBytes = try? opening.opener.makeInit(cookie: cached.cookie, payload: payload) {
                opening.pendingSend = initBytes
            }
            // One hello per peer at a time: its cookie serves every opening waiting for one.
            let helloOutstanding = opening.pendingSend.first == SecureMessageType.hello.rawValue
                && state.openings.contains { $0.peer.address == peer.address && $0.pendingSend.first == SecureMessageType.hello.rawValue }
            state.openings.append(opening)
            return helloOutstanding ? nil : opening.pendingSend
        }
    }

    /// A peer's cookie is valid for at least 60 s after it was made; it is reused for less.
    static let cookieReuseNanoseconds: UInt64 = 50_000_000_000

    /// Gives up an opening (``Relay/closeTrunk(room:to:)`` before it completed); true if there was one.
    func cancelOpening(room: String, peerKey: [UInt8]) -> Bool {
        state.withLock { state in
            let before = state.openings.count
            state.openings.removeAll { $0.room == room && $0.peer.publicKey == peerKey }
            return state.openings.count != before
        }
    }

    /// A cookie reply: the inits to send, for the opening whose hello it answers and every
    /// other opening to the same peer still waiting for a cookie; and the openings that
    /// failed (the peer holds another key than the one given).
    func cookieArrived(_ bytes: UnsafeRawBufferPointer, now: UInt64) -> (sends: [(bytes: [UInt8], destination: DatagramAddress)], failed: [TrunkEvent])? {
        guard let cookie = try? HandshakeCookie(parsing: bytes) else { return nil }
        return state.withLock { state -> (sends: [(bytes: [UInt8], destination: DatagramAddress)], failed: [TrunkEvent])? in
            guard let answered = state.openings.firstIndex(where: { $0.opener.hello.nonce == cookie.nonce }) else { return nil }
            let address = state.openings[answered].peer.address
            state.cookies[address] = (cookie, now)
            var sends: [(bytes: [UInt8], destination: DatagramAddress)] = []
            var failed: [TrunkEvent] = []
            var mismatched: Set<Int> = []
            for index in state.openings.indices where state.openings[index].peer.address == address {
                var opening = state.openings[index]
                guard opening.pendingSend.first == SecureMessageType.hello.rawValue,
                      let payload = try? TrunkOpening(room: opening.room).serialized() else { continue }
                do {
                    opening.pendingSend = try opening.opener.makeInit(cookie: cookie, payload: payload)
                } catch SecurityError.relayKeyMismatch {
                    mismatched.insert(index)
                    failed.append(TrunkEvent(room: opening.room, peer: opening.peer, openedHere: true, change: .ended(.keyMismatch)))
                    continue
                } catch {
                    continue
                }
                opening.nextSendNanoseconds = now &+ state.timings.openingRetransmit
                state.openings[index] = opening
                sends.append((opening.pendingSend, opening.destination))
            }
            if !mismatched.isEmpty {
                state.cookies[address] = nil
                state.openings = state.openings.enumerated().filter { !mismatched.contains($0.offset) }.map(\.element)
            }
            return (sends, failed)
        }
    }

    enum OpeningAnswer {
        case accepted(room: String, peer: RelayPeer, session: SecureSession, localIndex: UInt32, response: [UInt8])
        case refused(TrunkEvent)
    }

    /// A trunk response: the session, or the peer's refusal. Nil for anything that does not
    /// finish an opening in progress.
    func responseArrived(_ bytes: UnsafeRawBufferPointer, now: UInt64) -> OpeningAnswer? {
        guard let response = try? HandshakeResponse(parsing: bytes, type: .trunkResponse) else { return nil }
        let index = response.receiverIndex
        return state.withLock { state -> OpeningAnswer? in
            guard let position = state.openings.firstIndex(where: { $0.opener.localIndex == index }) else { return nil }
            var opening = state.openings[position]
            guard let (payload, session) = try? opening.opener.finish(response: bytes, nowNanoseconds: now),
                  let answer = try? ControlMessage(parsing: payload) else { return nil }
            state.openings.remove(at: position)
            if case let .error(error) = answer.body {
                return .refused(TrunkEvent(room: opening.room, peer: opening.peer, openedHere: true, change: .ended(.refused(error.message))))
            }
            return .accepted(room: opening.room, peer: opening.peer, session: session, localIndex: index, response: Array(bytes))
        }
    }

    /// Openings whose hello or init is due again, and those that gave up.
    func dueOpenings(now: UInt64) -> (resend: [(bytes: [UInt8], destination: DatagramAddress)], failed: [TrunkEvent]) {
        state.withLock { state in
            guard !state.openings.isEmpty else { return ([], []) }
            var resend: [(bytes: [UInt8], destination: DatagramAddress)] = []
            var failed: [TrunkEvent] = []
            state.openings.removeAll { opening in
                guard now < opening.deadlineNanoseconds else {
                    failed.append(TrunkEvent(room: opening.room, peer: opening.peer, openedHere: true, change: .ended(.unanswered)))
                    return true
                }
                return false
            }
            var helloSentTo: Set<HostAndPort> = []
            for index in state.openings.indices where now >= state.openings[index].nextSendNanoseconds {
                state.openings[index].nextSendNanoseconds = now &+ state.timings.openingRetransmit
                let opening = state.openings[index]
                if opening.pendingSend.first == SecureMessageType.hello.rawValue, !helloSentTo.insert(opening.peer.address).inserted { continue }
                resend.append((opening.pendingSend, opening.destination))
            }
            return (resend, failed)
        }
    }

    // MARK: Accepting (the peer opens)

    enum InboundDecision {
        /// Accept; `replacing` is a trunk for the same room and peer to end first.
        case accept(replacing: Record?)
        /// Both relays are opening this trunk and this relay's own opening wins.
        case refuse(String)
    }

    /// Whether to accept the peer's trunk for `room`. A newer handshake replaces a trunk that
    /// exists (the peer restarted, or re-opened after a silence). When both relays are opening
    /// at once, the opening of the relay whose key sorts first is kept, on both sides.
    func inbound(room: String, peerKey: [UInt8]) -> InboundDecision {
        state.withLock { state in
            if let mine = state.openings.firstIndex(where: { $0.room == room && $0.peer.publicKey == peerKey }) {
                if localKeyBytes.lexicographicallyPrecedes(peerKey) {
                    return .refuse("both relays opened this trunk; the one opened by the relay whose key sorts first is kept")
                }
                state.openings.remove(at: mine)
            }
            return .accept(replacing: state.trunks[Key(room: room, peerKey: peerKey)])
        }
    }

    // MARK: The trunks

    /// Records an open trunk; returns the one it replaces, if any.
    @discardableResult
    func register(_ trunk: TrunkLeg) -> Record? {
        let record = Record(trunk: trunk, trunkID: trunk.id, workerIndex: trunk.workerIndex, route: trunk.route, peer: trunk.peerRelay,
                            openedHere: trunk.openedHere)
        return state.withLock { state in
            let key = Key(room: trunk.room, peerKey: trunk.peerRelay.publicKey)
            let previous = state.trunks[key]
            state.trunks[key] = record
            return previous?.trunkID == trunk.id ? nil : previous
        }
    }

    /// Forgets a trunk that ended, unless a newer one took its place.
    func unregister(_ trunk: TrunkLeg) {
        state.withLock { state in
            let key = Key(room: trunk.room, peerKey: trunk.peerRelay.publicKey)
            if state.trunks[key]?.trunkID == trunk.id { state.trunks[key] = nil }
        }
    }

    func record(room: String, peerKey: [UInt8]) -> Record? {
        state.withLock { $0.trunks[Key(room: room, peerKey: peerKey)] }
    }

    /// Open trunks, for the API and metrics.
    var openTrunks: [(room: String, record: Record)] {
        state.withLock { state in state.trunks.map { ($0.key.room, $0.value) } }
    }

    var openingCount: Int { state.withLock { $0.openings.count } }
}
