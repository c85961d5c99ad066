import ParleyClient
import ParleyRelay

#if canImport(Glibc)
import Glibc
#endif

/// What the relay benchmarks measure and compare, in the same run: `parley-relay` in its own
/// process (``RelayProcess``, ``ServiceLikeRelay``) or the minimal ``BaselineForwarder``.
protocol ForwarderUnderTest: AnyObject {
    var port: UInt16 { get }
    /// How the load generator's members get into their rooms.
    var entry: MemberEntry { get }
    /// CPU seconds used so far.
    func cpuSeconds() -> Double
    func stop()
    /// Before the members join: where each sends (a forwarder of more than one address sets
    /// the socket's routes) and anything their rooms need first.
    func prepare(members: [LoadGenerator.Member], socket: MultiAddressSocket) throws
}

extension ForwarderUnderTest {
    func prepare(members: [LoadGenerator.Member], socket: MultiAddressSocket) throws {}
}

/// How members get into a room of the forwarder under test.
enum MemberEntry {
    /// The baseline has no protocol: it is handed the rooms' member addresses.
    case table((_ rooms: [[sockaddr_in]]) -> Void)
    /// A relay: each member joins as `parley call` does, through the client's own `RelayLink`
    /// (``CrowdJoin``), with a token for its room and identity.
    case join(security: RelayLink.Security, token: (_ room: String, _ identity: String) -> String)
}

/// Mints a token for (room, identity), valid for an hour: what a relay process's members join with.
func hourLongTokens(signedWith secret: TokenSecret) -> (String, String) -> String {
    { room, identity in
        let now = Int64(time(nil))
        return AccessToken(identity: identity, room: room, issuedAt: now, expiresAt: now + 3600).signed(with: secret)
    }
}
