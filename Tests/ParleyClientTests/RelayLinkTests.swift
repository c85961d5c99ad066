import Crypto
import Testing
@testable import ParleyClient
import ParleySecurity
import ParleyWire

/// The relay's half of the protocol, scripted: the real `RelayHandshake` and `SecureSession`
/// from ParleySecurity, answering as `ControlMessage` and `SecureMessage` specify
/// (docs/ARCHITECTURE.md, "The wire"). It lets the
/// link's state machine be driven step by step with the clock in the test's hands.
final class ScriptedRelay {
    let handshake = RelayHandshake(key: RelayKey())
    let cache = HandshakeReplayCache()
    let address = Array("127.0.0.1:5555".utf8)
    var session: SecureSession?
    var sequence: UInt32 = 100
    let secure: Bool
    /// The join inside the last init answered.
    var lastJoin: ControlMessage.Join?

    init(secure: Bool) { self.secure = secure }

    var relayKey: Curve25519.KeyAgreement.PublicKey { handshake.key.publicKey }

    func joinedMessage(cookie: UInt64 = 0xC00C1E) -> ControlMessage {
        ControlMessage(body: .joined(.init(
            cookie: cookie, ssrc: 42, identity: "alice", room: "standup", canPublish: true,
            keepaliveIntervalMilliseconds: 5_000, idleTimeoutMilliseconds: 30_000
        )))
    }

    /// Answers what the client sent, as the relay would; nil when the relay stays silent.
    func answer(_ datagram: [UInt8], replyWith reply: ControlMessage? = nil) throws -> [UInt8]? {
        try datagram.withUnsafeBytes { raw -> [UInt8]? in
            switch PacketKind(raw) {
            case .handshake where raw.first == SecureMessageType.hello.rawValue:
                return handshake.cookieReply(toHello: raw, address: address, unixSeconds: 1_000)
            case .handshake:
                var accepted = try handshake.acceptInit(raw, address: address, unixSeconds: 1_000, replayCache: cache)
                guard case let .join(join) = try ControlMessage(parsing: accepted.payload).body else {
                    Issue.record("the init carries no join")
                    return nil
                }
                lastJoin = join
                let (response, session) = try accepted.respond(relayIndex: 9, payload: try (reply ?? joinedMessage()).serialized(), nowNanoseconds: 0)
                self.session = session
                return response
            case .control:
                guard case .join = try ControlMessage(parsing: raw).body else { return nil }
                return try (reply ?? joinedMessage()).serialized()
            default:
                return nil
            }
        }
    }

    /// What the client sent, opened when sealed.
    func read(_ datagram: [UInt8]) throws -> ControlMessage {
        guard secure else { return try ControlMessage(parsing: datagram) }
        var plain = [UInt8](repeating: 0, count: datagram.count)
        let count = try datagram.withUnsafeBytes { raw in try plain.withUnsafeMutableBytes { try session!.open(raw, into: $0) } }
        return try ControlMessage(parsing: Array(plain.prefix(count)))
    }

    /// A relay → client message, sealed when secure.
    func send(_ body: ControlMessage.Body, reliable: Bool = false, sequence explicit: UInt32? = nil) throws -> [UInt8] {
        if explicit == nil { sequence += 1 }
        let bytes = try ControlMessage(sequence: explicit ?? sequence, isReliable: reliable, body: body).serialized()
        guard secure else { return bytes }
        var out = [UInt8](repeating: 0, count: SecureSession.sealedSize(plaintextCount: bytes.count))
        let count = try bytes.withUnsafeBytes { raw in try out.withUnsafeMutableBytes { try session!.seal(raw, into: $0, nowNanoseconds: 0) } }
        return Array(out.prefix(count))
    }
}

struct LinkHarness {
    var link: RelayLink
    let relay: ScriptedRelay
    var now: UInt64 = 1_000_000_000
    var events: [LinkEvent] = []
    var sent: [[UInt8]] = []

    init(secure: Bool = true, configure: (inout RelayLink.Configuration) -> Void = { _ in }) {
        relay = ScriptedRelay(secure: secure)
        var configuration = RelayLink.Configuration(
            relayAddress: "127.0.0.1:7800", room: "standup", token: "tok", ssrc: 42,
            security: secure ? .secure(relayKey: relay.relayKey) : .insecure
        )
        configure(&configuration)
        link = RelayLink(configuration: configuration)
    }

    mutating func take(_ output: RelayLink.Output) {
        events += output.events
        sent += output.datagrams
    }

    mutating func start() { take(link.start(now: now)) }

    mutating func deliver(_ datagram: [UInt8]) {
        var media: [[UInt8]] = []
        take(datagram.withUnsafeBytes { link.handle(datagram: $0, now: now) { media.append(Array($0)) } })
    }

    mutating func advance(byMilliseconds ms: UInt64) {
        now += ms * 1_000_000
        take(link.tick(now: now))
    }

    /// Runs the whole join: every answer the relay gives goes back to the link.
    mutating func join(rosterMembers: Int = 2) throws {
        start()
        while true {
            guard let last = sent.popLast() else { break }
            if let answer = try relay.answer(last) {
                deliver(answer)
                continue
            }
            let message = try relay.read(last)
            if case .ready = message.body {
                let members = (0..<rosterMembers).map { ControlMessage.Roster.Member(ssrc: UInt32(42 + $0), identity: "m\($0)", canPublish: true) }
                deliver(try relay.send(.roster(.init(version: 1, members: members)), reliable: true))
            }
            break
        }
    }
}

@Suite("The client's link to the relay")
struct RelayLinkTests {
    @Test(arguments: [true, false])
    func joinsAndReportsTheRoster(secure: Bool) throws {
        var harness = LinkHarness(secure: secure)
        try harness.join()
        #expect(harness.link.phase == .active)
        #expect(harness.events.contains(.joined(identity: "alice", room: "standup", canPublish: true, rejoin: false)))
        #expect(harness.link.roster.map(\.identity) == ["m0", "m1"])
        // The roster was reliable: the link acknowledged it.
        let ack = try harness.relay.read(try #require(harness.sent.last))
        #expect(ack.body == .ack(.init(sequence: harness.relay.sequence)))
        #expect((harness.link.protector.session != nil) == secure)
    }

    @Test func aSilentRelayIsReportedUnreachableAfterTheJoinTimeoutWithBackoff() {
        var harness = LinkHarness()
        harness.start()
        for _ in 0..<120 { harness.advance(byMilliseconds: 100) }
        #expect(harness.link.phase == .failed(.unreachable(relay: "127.0.0.1:7800", seconds: 10)))
        // 250 ms doubling to 2 s: about 8 hellos in 10 s, not one every tick.
        #expect((6...10).contains(harness.sent.count), "sent \(harness.sent.count) hellos")
        #expect(harness.sent.allSatisfy { $0.first == SecureMessageType.hello.rawValue })
    }

    @Test func aRelayThatAnswersHelloButNotTheHandshakeIsCalledAKeyProblem() throws {
        var harness = LinkHarness()
        harness.start()
        harness.deliver(try #require(try harness.relay.answer(harness.sent.removeLast())))
        for _ in 0..<120 { harness.advance(byMilliseconds: 100) }
        #expect(harness.link.phase == .failed(.handshakeUnanswered(relay: "127.0.0.1:7800")))
    }

    @Test func aRelayPresentingAnotherKeyIsRefusedAtOnce() throws {
        let impostor = ScriptedRelay(secure: true)
        var harness = LinkHarness()
        harness.start()
        harness.deliver(try #require(try impostor.answer(harness.sent.removeLast())))
        #expect(harness.link.phase == .failed(.relayKeyMismatch(relay: "127.0.0.1:7800")))
        #expect(harness.sent.isEmpty, "nothing, and above all not the token, is sent to an impostor")
    }

    @Test func aRefusedTokenEndsTheLinkWithTheRelaysReason() throws {
        var harness = LinkHarness()
        harness.start()
        harness.deliver(try #require(try harness.relay.answer(harness.sent.removeLast())))
        let refusal = ControlMessage(body: .error(.init(code: .tokenExpired, message: "expired 3 h ago")))
        harness.deliver(try #require(try harness.relay.answer(harness.sent.removeLast(), replyWith: refusal)))
        let failure = LinkFailure.refused(code: .tokenExpired, message: "expired 3 h ago")
        #expect(harness.link.phase == .failed(failure))
        #expect(failure.exitCode == 5)
        #expect(failure.description.contains("expired"))
    }

    @Test func aSilentLinkIsProbedThenRejoined() throws {
        var harness = LinkHarness()
        try harness.join()
        harness.sent.removeAll()
        harness.advance(byMilliseconds: 1_600)
        harness.advance(byMilliseconds: 1_000)
        let probes = try harness.sent.map { try harness.relay.read($0) }
        #expect(probes.allSatisfy { if case .ping = $0.body { true } else { false } })
        #expect(probes.count >= 1)
        for _ in 0..<30 { harness.advance(byMilliseconds: 100) }
        #expect(harness.link.phase == .greeting || harness.link.phase == .reconnecting)
        #expect(harness.events.contains { if case .reconnecting = $0 { true } else { false } })
        #expect(harness.link.protector.session == nil, "no media is sealed while reconnecting")
    }

    @Test func aRelayRestartIsFollowedByARejoin() throws {
        var harness = LinkHarness()
        try harness.join()
        harness.deliver(try harness.relay.send(.goodbye(.init(reason: .relayShuttingDown, message: "")), reliable: true))
        #expect(harness.link.phase == .reconnecting)
        harness.sent.removeAll()
        harness.advance(byMilliseconds: 300)
        #expect(harness.link.phase == .greeting)
        // The relay is back: the link joins again and says it was a rejoin.
        let hello = harness.sent.removeLast()
        harness.deliver(try #require(try harness.relay.answer(hello)))
        harness.deliver(try #require(try harness.relay.answer(harness.sent.removeLast())))
        #expect(try harness.relay.read(harness.sent.removeLast()).body == .ready(.init(cookie: 0xC00C1E)))
        harness.deliver(try harness.relay.send(.roster(.init(version: 1, members: [])), reliable: true))
        #expect(harness.link.phase == .active)
        #expect(harness.events.contains(.joined(identity: "alice", room: "standup", canPublish: true, rejoin: true)))
    }

    /// A restarted relay is a new process: it numbers its reliable messages from the start
    /// again. The roster of the new session must not be taken for a retransmission of the
    /// old one's (the link would acknowledge it, ignore it, and never become active).
    @Test(arguments: [true, false])
    func aRestartedRelayReusingSequenceNumbersStillGetsUsActive(secure: Bool) throws {
        var harness = LinkHarness(secure: secure)
        try harness.join()
        let firstRosterSequence = harness.relay.sequence
        harness.deliver(try harness.relay.send(.goodbye(.init(reason: .relayShuttingDown, message: "")), reliable: true))
        harness.sent.removeAll()
        harness.advance(byMilliseconds: 300)
        while let last = harness.sent.popLast(), let answer = try harness.relay.answer(last) { harness.deliver(answer) }
        harness.deliver(try harness.relay.send(.roster(.init(version: 1, members: [])), reliable: true, sequence: firstRosterSequence))
        #expect(harness.link.phase == .active)
        #expect(harness.events.contains(.joined(identity: "alice", room: "standup", canPublish: true, rejoin: true)))
    }

    @Test func twentySpoofedNotJoinedRepliesDoNotMakeTheLinkRejoin() throws {
        var harness = LinkHarness()
        try harness.join()
        // Anyone can send these with the relay's address; they echo none of our packets.
        for index in 0..<20 {
            let echo: [UInt8] = index % 2 == 0 ? [] : (0..<16).map { _ in UInt8.random(in: 0...255) }
            harness.deliver(try ControlMessage(body: .error(.init(code: .notJoined, message: "", echo: echo))).serialized())
        }
        #expect(harness.link.phase == .active)
        #expect(!harness.events.contains { if case .reconnecting = $0 { true } else { false } })
    }

    @Test func twoNotJoinedRepliesEchoingOurOwnPacketsMakeTheLinkRejoin() throws {
        var harness = LinkHarness()
        try harness.join()
        // The relay restarted: it answers two of our sealed packets with "not joined", echoing their tags.
        func answer(_ sealed: [UInt8]) throws -> [UInt8] {
            try ControlMessage(body: .error(.init(code: .notJoined, message: "", echo: Array(sealed.suffix(16))))).serialized()
        }
        harness.sent.removeAll()
        let first = try #require(harness.link.protector.protectBytes([0x80, 0x6F] + [UInt8](repeating: 0, count: 30)))
        harness.deliver(try answer(first))
        #expect(harness.link.phase == .active, "one reply alone is not enough")
        let ping = try #require(harness.sent.last, "the link asks again at once")
        harness.deliver(try answer(ping))
        #expect(harness.link.phase == .reconnecting)
    }

    @Test func anAuthenticatedPacketBetweenTwoNotJoinedRepliesKeepsTheSession() throws {
        var harness = LinkHarness()
        try harness.join()
        let sealed = try #require(harness.link.protector.protectBytes([0x80, 0x6F] + [UInt8](repeating: 0, count: 30)))
        let reply = try ControlMessage(body: .error(.init(code: .notJoined, message: "", echo: Array(sealed.suffix(16))))).serialized()
        harness.deliver(reply)
        harness.deliver(try harness.relay.send(.pong(.init(timestamp: 1))))
        harness.deliver(reply)
        #expect(harness.link.phase == .active, "the relay answered inside the session in between: it knows us")
    }

    @Test func aForgedNoEncryptionReplyDuringTheRegreetingNeverEndsTheCall() throws {
        var harness = LinkHarness()
        try harness.join()
        harness.deliver(try harness.relay.send(.goodbye(.init(reason: .relayShuttingDown, message: "")), reliable: true))
        harness.advance(byMilliseconds: 300)
        #expect(harness.link.phase == .greeting)
        let hello = try #require(harness.sent.last)
        let nonce = Array(hello[4..<12])
        // A burst that even echoes the hello's nonce (someone on the path saw it): the link keeps greeting.
        for _ in 0..<50 {
            harness.deliver(try ControlMessage(body: .error(.init(code: .encryptionUnavailable, message: "use --insecure", echo: nonce))).serialized())
            harness.advance(byMilliseconds: 100)
        }
        #expect(!harness.events.contains { if case .failed = $0 { true } else { false } })
        // The relay answers at last and the call goes on.
        while let last = harness.sent.popLast(), let answer = try harness.relay.answer(last) { harness.deliver(answer) }
        harness.deliver(try harness.relay.send(.roster(.init(version: 1, members: [])), reliable: true))
        #expect(harness.link.phase == .active)
    }

    @Test func aFirstJoinAnsweredOnlyByNoEncryptionRepliesFailsWithoutSuggestingInsecure() throws {
        var harness = LinkHarness()
        harness.start()
        let hello = try #require(harness.sent.last)
        let nonce = Array(hello[4..<12])
        // Replies that echo nothing, or another nonce, are not about our hello.
        harness.deliver(try ControlMessage(body: .error(.init(code: .encryptionUnavailable, message: ""))).serialized())
        harness.deliver(try ControlMessage(body: .error(.init(code: .encryptionUnavailable, message: "", echo: [1, 2, 3, 4, 5, 6, 7, 8]))).serialized())
        #expect(harness.link.phase == .greeting)
        // A relay really started --insecure answers every hello, and only then does the link give up.
        var answered = 0
        while harness.link.phase == .greeting, answered < 10 {
            harness.deliver(try ControlMessage(body: .error(.init(code: .encryptionUnavailable, message: "", echo: nonce))).serialized())
            answered += 1
            harness.advance(byMilliseconds: 600)
        }
        let failure = LinkFailure.relayWithoutEncryption(relay: "127.0.0.1:7800")
        #expect(harness.link.phase == .failed(failure))
        #expect(answered >= 3)
        #expect(failure.exitCode == 4)
        #expect(!failure.description.contains("--insecure only") && !failure.description.contains("join it with --insecure"))
        #expect(!LinkFailure.refused(code: .encryptionUnavailable, message: "").description.contains("--insecure"))
    }

    @Test func aTakenSSRCMakesTheLinkJoinAgainWithANewOne() throws {
        var harness = LinkHarness()
        harness.start()
        harness.deliver(try #require(try harness.relay.answer(harness.sent.removeLast())))
        let refusal = ControlMessage(body: .error(.init(code: .ssrcInUse, message: "SSRC 42 is already used")))
        harness.deliver(try #require(try harness.relay.answer(harness.sent.removeLast(), replyWith: refusal)))
        #expect(harness.link.phase == .greeting, "not a failure: the link starts over")
        #expect(harness.link.ssrc != 42)
        try harness.join()
        #expect(harness.link.phase == .active)
        let join = try #require(harness.relay.lastJoin)
        #expect(join.ssrc == harness.link.ssrc)
    }

    @Test func aRateLimitedJoinIsTriedAgainWhenTheBudgetHasRefilled() throws {
        var harness = LinkHarness()
        harness.start()
        harness.deliver(try #require(try harness.relay.answer(harness.sent.removeLast())))
        let refusal = ControlMessage(body: .error(.init(code: .rateLimited, message: "joined too often")))
        harness.deliver(try #require(try harness.relay.answer(harness.sent.removeLast(), replyWith: refusal)))
        #expect(!harness.events.contains { if case .failed = $0 { true } else { false } })
        harness.sent.removeAll()
        harness.advance(byMilliseconds: 1_000)
        #expect(harness.sent.isEmpty, "it waits for the relay's budget")
        harness.advance(byMilliseconds: 1_100)
        #expect(harness.sent.last?.first == SecureMessageType.hello.rawValue, "then greets again, with a new handshake")
    }

    @Test func aJoinTurnedAwayUntilItsTimeoutSaysSoRatherThanUnreachable() throws {
        var harness = LinkHarness()
        harness.start()
        let refusal = ControlMessage(body: .error(.init(code: .rateLimited, message: "ada joined standup too often")))
        for _ in 0..<200 where !harness.events.contains(where: { if case .failed = $0 { true } else { false } }) {
            while let last = harness.sent.popLast() {
                if let answer = try harness.relay.answer(last, replyWith: refusal) { harness.deliver(answer) }
            }
            harness.advance(byMilliseconds: 100)
        }
        let failure = LinkFailure.refused(code: .rateLimited, message: "ada joined standup too often")
        #expect(harness.link.phase == .failed(failure))
        print(failure.description)
        #expect(failure.description.contains("wait a minute"))
        #expect(failure.exitCode == 7)
    }

    @Test func unsealedControlIsIgnoredOnASecureLink() throws {
        var harness = LinkHarness()
        try harness.join()
        harness.deliver(try ControlMessage(sequence: 1, isReliable: true, body: .goodbye(.init(reason: .replaced, message: ""))).serialized())
        #expect(harness.link.phase == .active, "a forged plaintext goodbye must not end a secure call")
        #expect(harness.link.droppedDatagrams == 1)
    }

    @Test func aRetransmittedRosterIsAcknowledgedAgainButReportedOnce() throws {
        var harness = LinkHarness()
        try harness.join()
        // A retransmission is the same message sealed again (a new counter), not the same bytes.
        let roster = ControlMessage.Body.roster(.init(version: 2, members: [.init(ssrc: 1, identity: "bob", canPublish: true)]))
        let first = try harness.relay.send(roster, reliable: true)
        let again = try harness.relay.send(roster, reliable: true, sequence: harness.relay.sequence)
        harness.events.removeAll()
        harness.sent.removeAll()
        harness.deliver(first)
        harness.deliver(again)
        harness.deliver(again)  // the very same bytes: a replay, dropped before it is read
        #expect(harness.events.filter { if case .roster = $0 { true } else { false } }.count == 1)
        #expect(harness.sent.count == 2, "each copy is acknowledged")
    }

    @Test func rosterPagesAreAssembledAndOlderVersionsIgnored() {
        var assembler = RosterAssembler()
        let a = ControlMessage.Roster.Member(ssrc: 1, identity: "a", canPublish: true)
        let b = ControlMessage.Roster.Member(ssrc: 2, identity: "b", canPublish: true)
        #expect(assembler.add(.init(version: 5, pageIndex: 1, pageCount: 2, members: [b])) == nil)
        #expect(assembler.add(.init(version: 5, pageIndex: 0, pageCount: 2, members: [a])) == [a, b])
        #expect(assembler.add(.init(version: 4, members: [a])) == nil)
        #expect(assembler.add(.init(version: 6, members: [b])) == [b])
    }

    @Test func pongsGiveTheRoundTripTime() throws {
        var harness = LinkHarness()
        try harness.join()
        harness.sent.removeAll()
        while harness.sent.isEmpty { harness.advance(byMilliseconds: 100) }
        let ping = try harness.relay.read(try #require(harness.sent.last))
        guard case let .ping(body) = ping.body else { Issue.record("expected a ping"); return }
        harness.now += 42_000_000
        harness.deliver(try harness.relay.send(.pong(.init(timestamp: body.timestamp))))
        #expect(harness.events.contains(.roundTrip(nanoseconds: 42_000_000)))
    }

    @Test func leavingWaitsForTheAcknowledgementButNotForever() throws {
        var harness = LinkHarness()
        try harness.join()
        harness.sent.removeAll()
        harness.take(harness.link.leave(now: harness.now))
        let leave = try harness.relay.read(try #require(harness.sent.last))
        #expect(leave.body == .leave(.init()) && leave.isReliable)
        harness.deliver(try harness.relay.send(.ack(.init(sequence: leave.sequence))))
        #expect(harness.link.phase == .closed)

        var silent = LinkHarness()
        try silent.join()
        silent.take(silent.link.leave(now: silent.now))
        for _ in 0..<12 { silent.advance(byMilliseconds: 100) }
        #expect(silent.link.phase == .closed)
        #expect(silent.events.last == .left)
    }
}

extension LinkProtector {
    /// Seals `bytes` as the capture thread would, for tests that need one of our packets.
    func protectBytes(_ bytes: [UInt8]) -> [UInt8]? {
        bytes.withUnsafeBytes { protect($0, nowNanoseconds: 0) }
    }
}
