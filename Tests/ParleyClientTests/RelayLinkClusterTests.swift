import Crypto
import Testing
@testable import ParleyClient
import ParleySecurity
import ParleyWire

/// The link in a cluster of relays: redirects it follows (and those it must not), and the
/// other relay it joins through when its own falls silent.
@Suite("The client's link in a cluster")
struct RelayLinkClusterTests {
    static func entry(_ relay: ScriptedRelay, _ address: String) -> ControlMessage.ClusterRelay {
        ControlMessage.ClusterRelay(address: address, publicKey: Array(relay.relayKey.rawRepresentation))
    }

    static func redirect(to relay: ScriptedRelay, at address: String, others: [ControlMessage.ClusterRelay] = []) -> ControlMessage {
        ControlMessage(body: .redirect(.init(room: "standup", relay: entry(relay, address), others: others)))
    }

    /// Hello → cookie → init, answered by `relay` with `reply` (joined by default).
    static func handshake(_ harness: inout LinkHarness, with relay: ScriptedRelay, reply: ControlMessage? = nil) throws {
        let hello = harness.sent.removeLast()
        #expect(hello.first == SecureMessageType.hello.rawValue)
        harness.deliver(try #require(try relay.answer(hello)))
        harness.deliver(try #require(try relay.answer(harness.sent.removeLast(), replyWith: reply)))
    }

    /// Ready → roster: the link becomes active on `relay`.
    static func confirm(_ harness: inout LinkHarness, with relay: ScriptedRelay) throws {
        guard case .ready = try relay.read(harness.sent.removeLast()).body else { Issue.record("no ready"); return }
        harness.deliver(try relay.send(.roster(.init(version: 1, members: [.init(ssrc: 42, identity: "alice", canPublish: true)])), reliable: true))
    }

    @Test func aRedirectInsideTheHandshakeSendsTheJoinToTheRoomsRelayWithTheKeyItNames() throws {
        var harness = LinkHarness()
        let host = ScriptedRelay(secure: true)
        harness.start()
        try Self.handshake(&harness, with: harness.relay, reply: Self.redirect(to: host, at: "127.0.0.2:7800"))
        #expect(harness.link.relayAddress == "127.0.0.2:7800")
        #expect(harness.events.contains(.redirected(to: "127.0.0.2:7800")))
        // The invite's relay made no session; the new handshake pins the host's key (its cookie checks out).
        try Self.handshake(&harness, with: host, reply: ControlMessage(body: .joined(.init(
            cookie: 7, ssrc: 42, identity: "alice", room: "standup", canPublish: true, keepaliveIntervalMilliseconds: 5_000,
            idleTimeoutMilliseconds: 30_000, clusterRelays: [Self.entry(harness.relay, "127.0.0.1:7800")]))))
        try Self.confirm(&harness, with: host)
        #expect(harness.link.phase == .active)
        #expect(harness.link.clusterRelays.map(\.address) == ["127.0.0.1:7800", "127.0.0.2:7800"])
    }

    @Test func aRedirectOutsideTheAuthenticatedHandshakeMovesNothing() throws {
        var harness = LinkHarness()
        let impostor = ScriptedRelay(secure: true)
        harness.start()
        harness.deliver(try Self.redirect(to: impostor, at: "203.0.113.9:7800").serialized())
        #expect(harness.link.relayAddress == "127.0.0.1:7800")
        #expect(harness.link.droppedDatagrams == 1)
        #expect(harness.link.phase == .greeting)
    }

    @Test func aRedirectForAnotherRoomIsIgnored() throws {
        var harness = LinkHarness()
        harness.start()
        let elsewhere = ControlMessage(body: .redirect(.init(room: "other", relay: Self.entry(ScriptedRelay(secure: true), "127.0.0.2:7800"))))
        try Self.handshake(&harness, with: harness.relay, reply: elsewhere)
        #expect(harness.link.relayAddress == "127.0.0.1:7800")
    }

    @Test func relaysThatKeepRedirectingEndTheFirstJoinWithAReasonAfterFourHops() throws {
        var harness = LinkHarness()
        let relays = (0..<6).map { _ in ScriptedRelay(secure: true) }
        harness.start()
        var current = harness.relay
        for (index, next) in relays.enumerated() {
            guard case .greeting = harness.link.phase else { break }
            try Self.handshake(&harness, with: current, reply: Self.redirect(to: next, at: "127.0.0.\(index + 2):7800"))
            current = next
        }
        guard case let .failed(.refused(code, message)) = harness.link.phase else {
            Issue.record("phase \(harness.link.phase)")
            return
        }
        #expect(code == .placementUnavailable)
        #expect(message.contains("more than 4 times"))
        #expect(harness.events.filter { if case .redirected = $0 { true } else { false } }.count == 4)
    }

    /// Its relay silent for 1.5 s (probed four times a second from 0.75 s), a member of a
    /// cluster rejoins through another relay it learned of; without one, it waits the usual 5 s.
    @Test func aSilentRelayIsGivenUpAfterOneAndAHalfSecondsForAnotherOfTheCluster() throws {
        var harness = LinkHarness()
        let other = ScriptedRelay(secure: true)
        harness.start()
        try Self.handshake(&harness, with: harness.relay, reply: ControlMessage(body: .joined(.init(
            cookie: 7, ssrc: 42, identity: "alice", room: "standup", canPublish: true, keepaliveIntervalMilliseconds: 5_000,
            idleTimeoutMilliseconds: 30_000, clusterRelays: [Self.entry(other, "127.0.0.3:7800")]))))
        try Self.confirm(&harness, with: harness.relay)
        #expect(harness.link.phase == .active)
        harness.sent.removeAll()
        for _ in 0..<14 { harness.advance(byMilliseconds: 100) }
        #expect(harness.link.phase == .active)
        #expect(harness.sent.count >= 2, "probing pings from 0.75 s")
        harness.advance(byMilliseconds: 100)
        #expect(harness.link.phase == .reconnecting)
        #expect(harness.link.relayAddress == "127.0.0.3:7800")
        #expect(harness.events.contains { if case let .reconnecting(reason) = $0 { reason.contains("rejoining through 127.0.0.3:7800") } else { false } })
        harness.advance(byMilliseconds: 300)
        try Self.handshake(&harness, with: other)
        try Self.confirm(&harness, with: other)
        #expect(harness.link.phase == .active)
        #expect(harness.events.last == .roster([.init(ssrc: 42, identity: "alice", canPublish: true)]))
    }

    /// The relay through which the member rejoins still has the room on the lost relay (its
    /// lease has not run out): the link does not go back there, it asks again shortly.
    @Test func aRedirectBackToTheRelayJustLostIsAskedAgainRatherThanFollowed() throws {
        var harness = LinkHarness()
        let host = ScriptedRelay(secure: true)
        harness.start()
        try Self.handshake(&harness, with: harness.relay, reply: Self.redirect(to: host, at: "127.0.0.2:7800"))
        try Self.handshake(&harness, with: host)
        try Self.confirm(&harness, with: host)
        for _ in 0..<16 { harness.advance(byMilliseconds: 100) }
        #expect(harness.link.relayAddress == "127.0.0.1:7800", "back through the invite's relay")
        harness.advance(byMilliseconds: 300)
        try Self.handshake(&harness, with: harness.relay, reply: Self.redirect(to: host, at: "127.0.0.2:7800"))
        #expect(harness.link.relayAddress == "127.0.0.1:7800")
        #expect(harness.link.phase == .reconnecting)
        harness.advance(byMilliseconds: 300)
        #expect(harness.sent.last?.first == SecureMessageType.hello.rawValue, "asks the invite's relay again")
    }

    @Test func aClusterStoreThatCannotPlaceTheRoomNowIsAskedAgainAndNamedIfTheJoinTimesOut() throws {
        var harness = LinkHarness()
        harness.start()
        let refusal = ControlMessage(body: .error(.init(code: .placementUnavailable, message: "the relay cannot reach its cluster's store")))
        try Self.handshake(&harness, with: harness.relay, reply: refusal)
        #expect(harness.link.phase == .reconnecting)
        for _ in 0..<110 {
            harness.advance(byMilliseconds: 100)
            if harness.link.phase == .greeting, let hello = harness.sent.last, hello.first == SecureMessageType.hello.rawValue {
                try Self.handshake(&harness, with: harness.relay, reply: refusal)
            }
        }
        guard case let .failed(failure) = harness.link.phase else { Issue.record("phase \(harness.link.phase)"); return }
        #expect(failure == .refused(code: .placementUnavailable, message: "the relay cannot reach its cluster's store"))
        #expect(failure.description.contains("could not give the room a place"))
    }
}
