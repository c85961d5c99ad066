import Crypto
import Testing
@testable import ParleyClient
import ParleySecurity
import ParleyWire

/// The relay's half of the protocol, scripted: the real `RelayHandshake` and `SecureSession`
/// from ParleySecurity, answering as DESIGN.md and `ControlMessage` specify. It lets the
/// link's state machine be driven step by step with the clock in the test's hands.
final class ScriptedRelay {
    let handshake = RelayHandshake(key: RelayKey())
    let cache = HandshakeReplayCache()
    let address = Array("127.0.0.1:5555".utf8)
    var session: SecureSession?
    var sequence: UInt32 = 100
    let secure: Bool

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
                #expect(try ControlMessage(parsing: accepted.payload).body.type == .join)
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

    @Test(arguments: [true, false])
    func aRestartedRelayThatNumbersItsMessagesAfreshIsHeard(secure: Bool) throws {
        var harness = LinkHarness(secure: secure)
        let firstSequence = harness.relay.sequence
        try harness.join()
        harness.deliver(try harness.relay.send(.goodbye(.init(reason: .relayShuttingDown, message: "")), reliable: true))
        harness.sent.removeAll()
        harness.relay.sequence = firstSequence  // the new process starts counting where the old one did
        harness.advance(byMilliseconds: 300)
        try harness.join()
        #expect(harness.link.phase == .active, "the new relay's roster, numbered as the old one's was, is not taken for a duplicate")
        #expect(harness.events.contains(.joined(identity: "alice", room: "standup", canPublish: true, rejoin: true)))
    }

    @Test func aNotJoinedReplyMakesTheLinkRejoinEvenUnsealed() throws {
        var harness = LinkHarness()
        try harness.join()
        harness.deliver(try ControlMessage(body: .error(.init(code: .notJoined, message: ""))).serialized())
        #expect(harness.link.phase == .reconnecting)
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
