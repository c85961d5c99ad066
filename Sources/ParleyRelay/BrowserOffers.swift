import ParleyWebRTC
import Synchronization

/// The browser members the relay answered an offer for, shared by the web port and the
/// loops: found by the relay's ICE ufrag (what a browser's check names), by the addresses
/// their authentic checks came from (what a DTLS ClientHello is matched by), and by id (what
/// the page's signalling names).
///
/// Its lock is taken by the signalling, and by a loop only for a stranger's STUN or DTLS
/// datagram, never for a member's media. Offers are bounded: at most ``maximumPending``
/// answered and not yet in a call, ``maximumPendingPerIdentity`` of them for one identity, and
/// each is forgotten ``pendingLifetimeNanoseconds`` after its answer unless its DTLS started.
final class BrowserOffers: Sendable {
    private struct Table {
        var byUsernameFragment: [String: BrowserMember] = [:]
        var byID: [String: BrowserMember] = [:]
        var byCheckedAddress: [PeerAddress: BrowserMember] = [:]
    }

    private let table = Mutex(Table())

    static let maximumPending = 1_024
    static let maximumPendingPerIdentity = 8
    static let pendingLifetimeNanoseconds: UInt64 = 30_000_000_000

    /// Keeps a new member until its call ends; refuses (with words for the person) when too
    /// many offers wait.
    func register(_ member: BrowserMember, now: UInt64) -> String? {
        table.withLock { table in
            Self.expire(&table, now: now)
            let pending = table.byID.values.filter { !$0.hasLeg }
            guard pending.count < Self.maximumPending else { return "the relay has too many browsers setting up calls; try again in a minute" }
            guard pending.filter({ $0.identity == member.identity }).count < Self.maximumPendingPerIdentity else {
                return "\(member.identity) has too many calls being set up; close other tabs, or wait 30 s"
            }
            table.byID[member.id] = member
            table.byUsernameFragment[member.iceUsernameFragment] = member
            return nil
        }
    }

    func member(usernameFragment: Substring) -> BrowserMember? {
        table.withLock { $0.byUsernameFragment[String(usernameFragment)] }
    }

    func member(id: String) -> BrowserMember? {
        table.withLock { $0.byID[id] }
    }

    /// An authentic ICE check for `member` came from `peer`.
    func noteCheck(_ member: BrowserMember, from peer: PeerAddress) {
        member.noteCheck(from: peer)
        table.withLock { table in
            guard table.byCheckedAddress[peer] == nil, member.wasChecked(from: peer) else { return }
            table.byCheckedAddress[peer] = member
        }
    }

    /// The member whose authentic check came from `peer`, if its leg is not made yet.
    func member(checkedFrom peer: PeerAddress) -> BrowserMember? {
        table.withLock { table in
            guard let member = table.byCheckedAddress[peer], !member.hasLeg, !member.isEnded else { return nil }
            return member
        }
    }

    /// Forgets the member (its call ended, or never started).
    func remove(_ member: BrowserMember) {
        table.withLock { table in
            if table.byID[member.id] === member { table.byID[member.id] = nil }
            if table.byUsernameFragment[member.iceUsernameFragment] === member { table.byUsernameFragment[member.iceUsernameFragment] = nil }
            for (peer, entry) in table.byCheckedAddress where entry === member { table.byCheckedAddress[peer] = nil }
        }
    }

    /// Offers answered longer ago than their lifetime with no DTLS started are dropped; their
    /// pages are told.
    func expire(now: UInt64) {
        table.withLock { Self.expire(&$0, now: now) }
    }

    private static func expire(_ table: inout Table, now: UInt64) {
        for member in table.byID.values where !member.hasLeg && now &- member.createdNanoseconds > pendingLifetimeNanoseconds {
            member.end("the browser never reached the relay's UDP port: a firewall may block UDP to it (ask whoever runs the relay which port to open)")
            table.byID[member.id] = nil
            table.byUsernameFragment[member.iceUsernameFragment] = nil
            for (peer, entry) in table.byCheckedAddress where entry === member { table.byCheckedAddress[peer] = nil }
        }
    }

    var count: Int { table.withLock { $0.byID.count } }
}

/// What a relay that takes browser members shares between its loops: the offers it answered
/// and its DTLS certificate.
struct BrowserEdge: Sendable {
    let offers: BrowserOffers
    let dtls: DTLSContext
}
