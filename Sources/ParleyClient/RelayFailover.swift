import Crypto
import ParleyWire

/// Which relay of a cluster the link talks to, and where it goes next: the invite's relay at
/// first; the relays the cluster names (in `joined` answers and redirects); a redirect to the
/// relay that hosts the room; and, when the relay falls silent, stops answering or shuts down,
/// the next one to rejoin through, the relay just lost last. Plain Swift with time passed in;
/// ``RelayLink`` acts on its answers (it begins, restarts or gives up the join).
struct RelayFailover {
    /// The relay the link talks to now, "HOST:PORT".
    private(set) var relayAddress: String
    /// The key pinned for ``relayAddress`` (or plaintext, with `--insecure`).
    private(set) var security: RelayLink.Security
    /// Other relays of the cluster, the newest news first (at most ``maximumKnownRelays``);
    /// empty for a relay on its own.
    private(set) var clusterRelays: [ControlMessage.ClusterRelay] = []
    /// The invite's relay, which a secure link can always go back to with the key it pinned.
    private let invite: ControlMessage.ClusterRelay
    /// How the invite said to talk: a secure link never goes plaintext, nor the reverse.
    private let inviteSecurity: RelayLink.Security
    /// Redirects followed since the last join that succeeded.
    private var redirectsInJoin = 0
    /// The relay given up for silence, and when: its room stays placed on it until the
    /// store's lease runs out, so a redirect back to it then means "ask again shortly".
    private var lostRelay: (address: String, at: UInt64)?
    /// Turns through the other relays when one after another fails.
    private var nextFallback = 0

    /// Redirects one join follows before giving up (a cluster places a room in one hop; more
    /// means its relays disagree).
    static let maximumRedirects = 4
    static let maximumKnownRelays = 8
    /// How long after losing a relay a redirect back to it is taken for a placement not yet expired.
    static let lostRelayMemoryNanoseconds: UInt64 = 10_000_000_000

    init(relayAddress: String, security: RelayLink.Security) {
        self.relayAddress = relayAddress
        self.security = security
        inviteSecurity = security
        switch security {
        case let .secure(key): invite = .init(address: relayAddress, publicKey: Array(key.rawRepresentation))
        case .insecure: invite = .init(address: relayAddress, publicKey: [])
        }
    }

    /// Whether another relay is known to rejoin through.
    var canFailOver: Bool {
        relayAddress != invite.address || clusterRelays.contains { $0.address != relayAddress }
    }

    /// Adds relays to those known, the newest news first, at most ``maximumKnownRelays``.
    mutating func learn(_ relays: [ControlMessage.ClusterRelay]) {
        guard !relays.isEmpty else { return }
        var merged: [ControlMessage.ClusterRelay] = []
        for relay in relays + clusterRelays where !merged.contains(where: { $0.address == relay.address }) {
            merged.append(relay)
        }
        clusterRelays = Array(merged.prefix(Self.maximumKnownRelays))
    }

    /// The relay the link talks to fell silent at `now`: a redirect back to it soon after
    /// means its room's placement has not expired yet.
    mutating func lost(now: UInt64) {
        lostRelay = (relayAddress, now)
    }

    /// A join succeeded: the next one may follow redirects afresh.
    mutating func joined() {
        redirectsInJoin = 0
    }

    /// What to do with an authenticated redirect.
    enum RedirectAnswer: Equatable {
        /// Join there (``relayAddress`` is now that relay).
        case follow(String)
        /// The redirect names the relay just lost, whose placement still stands: ask again shortly.
        case askAgainSoon
        /// Too many redirects in one join, or a relay whose key this link cannot use.
        case giveUp(String)
    }

    mutating func follow(_ redirect: ControlMessage.Redirect, now: UInt64) -> RedirectAnswer {
        learn(redirect.others + [redirect.relay])
        if let lost = lostRelay, lost.address == redirect.relay.address, now &- lost.at < Self.lostRelayMemoryNanoseconds {
            // The relay just lost still holds the room until its lease runs out (etcd checks
            // expiries every half second).
            return .askAgainSoon
        }
        redirectsInJoin += 1
        guard redirectsInJoin <= Self.maximumRedirects, use(redirect.relay) else {
            redirectsInJoin = 0
            return .giveUp("the cluster's relays sent this join on more than \(Self.maximumRedirects) times, or to a relay whose key is unusable")
        }
        return .follow(redirect.relay.address)
    }

    /// Moves to the next relay other than the current one: the invite's, then those learned,
    /// in turn, the relay just lost last. Returns its address, or nil when there is none.
    mutating func moveToAnotherRelay() -> String? {
        var candidates: [ControlMessage.ClusterRelay] = []
        if relayAddress != invite.address { candidates.append(invite) }
        candidates += clusterRelays.filter { $0.address != relayAddress && $0.address != invite.address }
        if let lost = lostRelay { candidates.sort { ($0.address == lost.address ? 1 : 0) < ($1.address == lost.address ? 1 : 0) } }
        for _ in 0..<candidates.count {
            let next = candidates[nextFallback % candidates.count]
            nextFallback &+= 1
            if use(next) { return next.address }
        }
        return nil
    }

    /// Points the link at `relay`; false if its key does not suit this link (a secure link
    /// never goes plaintext, nor the reverse).
    private mutating func use(_ relay: ControlMessage.ClusterRelay) -> Bool {
        switch inviteSecurity {
        case .secure:
            guard let key = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: relay.publicKey) else { return false }
            security = .secure(relayKey: key)
        case .insecure:
            guard relay.publicKey.isEmpty else { return false }
            security = .insecure
        }
        relayAddress = relay.address
        return true
    }
}
