import ParleyWire
import Testing

/// After a real deployment: two people talk through the relay you installed, from wherever
/// you run this. Give it two invites for the same room (minted on the VPS with
/// `sudo parley-relay token …`), separated by a space:
///
///     PARLEY_SMOKE_INVITES="parley://… parley://…" swift test --filter DeployedRelaySmokeTests
///
/// Without the variable it does nothing (the suite's own relay tests cover the rest).
@Suite("Deploy: smoke test against a deployed relay")
struct DeployedRelaySmokeTests {
    static let invites = currentEnvironment()["PARLEY_SMOKE_INVITES"]
    /// Both members are here and the relay may be far away: a lost frame or two, and the
    /// delay there and back again that a call across a continent has (ITU-T G.114 keeps
    /// one-way mouth-to-ear under 150 ms for a good call; this is only the network's part).
    static let internet = InstallLifecycleTests.CallThresholds(
        delivery: 0.97, medianDelayMilliseconds: 150, worstDelayMilliseconds: 400, similarity: 0.7)

    @Test(.enabled(if: invites != nil, "set PARLEY_SMOKE_INVITES to two invites for one room"))
    func twoPeopleTalkThroughADeployedRelay() throws {
        let urls = try (Self.invites ?? "").split(separator: " ").map { try InviteURL(parsing: String($0)) }
        try #require(urls.count == 2 && urls[0].room == urls[1].room, "two invites for the same room")
        let first = try TestCaller(name: "first", invite: urls[0], ssrc: 0x5A0E1)
        let second = try TestCaller(name: "second", invite: urls[1], ssrc: 0x5A0E2)
        first.start()
        second.start()
        let joined = pumpAll([first, second], timeout: 15) {
            first.isActive && second.isActive && first.link.roster.count >= 2 && second.link.roster.count >= 2
        }
        print("joined \(urls[0].host):\(urls[0].port) room \(urls[0].room): \(joined); first \(first.events.suffix(2)), second \(second.events.suffix(2))")
        try #require(joined)
        try InstallLifecycleTests().expectConversation(
            first, try SpeechClip(wav: "/usr/share/sounds/alsa/Front_Center.wav"),
            second, try SpeechClip(wav: "/usr/share/sounds/alsa/Front_Left.wav"), when: "through the deployed relay",
            thresholds: Self.internet)
    }
}
