import Crypto
import Foundation
import ParleyClient
@testable import ParleyRelay
import ParleyRelayTestSupport
import ParleySecurity
import ParleyWire
import Synchronization
import Testing

/// Relays on 127.0.0.11, 127.0.0.12 and 127.0.0.13 (one per address, as separate machines
/// would be; not the cluster tests' 127.0.0.1–3, whose relays bind ports they picked as free,
/// which a relay of ours binding port 0 with SO_REUSEPORT could share), each with its own key
/// and token secret, trusting the others as the cluster tells them.
final class RelayTrio {
    let fixtures: [RelayFixture]
    let peers: [RelayPeer]
    let events = TrunkEventLog()

    /// `trusts[i]`: the relays relay `i` accepts trunks from (by default, all the others).
    init(count: Int = 3, trusts: [[Int]]? = nil, timings: TrunkTimings = RelayTrio.quickTimings) throws {
        fixtures = try (0..<count).map { index in
            try RelayFixture.startSecure { configuration in configuration.listen = HostAndPort(host: "127.0.0.\(index + 11)", port: 0) }
        }
        peers = fixtures.enumerated().map { index, fixture in
            RelayPeer(address: HostAndPort(host: "127.0.0.\(index + 11)", port: fixture.port), publicKey: fixture.relayKey!.publicKey)
        }
        for (index, fixture) in fixtures.enumerated() {
            let trusted = trusts?[index] ?? (0..<count).filter { $0 != index }
            fixture.relay.setTrustedRelays(trusted.map { peers[$0] })
            fixture.relay.trunkTimings = timings
            let events = self.events
            fixture.relay.setTrunkEventHandler { event in events.append(event) }
        }
    }

    static var quickTimings: TrunkTimings {
        var timings = TrunkTimings()
        timings.emptyRoomGraceMilliseconds = 600
        timings.openingTimeoutMilliseconds = 1_500
        return timings
    }

    func shutdown() { for fixture in fixtures { fixture.relay.shutdown() } }

    func openTrunk(_ room: String, from opener: Int, to peer: Int) throws {
        try fixtures[opener].relay.openTrunk(room: room, to: peers[peer])
    }

    /// Waits until `count` trunk ends are open on every relay listed.
    func waitForOpenTrunks(_ count: Int, on relays: [Int], timeout: Double = 5) -> Bool {
        let deadline = now() + timeout
        while now() < deadline {
            if relays.allSatisfy({ fixtures[$0].relay.openTrunks.count == count }) { return true }
            usleep(10_000)
        }
        return false
    }

    func member(on relay: Int, room: String, identity: String, moderator: Bool = false, ssrc: UInt32 = UInt32.random(in: 1...UInt32.max)) -> SecureMember {
        SecureMember(relayPort: fixtures[relay].port, relayHost: "127.0.0.\(relay + 11)", room: room,
                     token: fixtures[relay].token(room: room, identity: identity, isModerator: moderator), relayKey: fixtures[relay].relayKey!.publicKey, ssrc: ssrc)
    }

    var recordedEvents: [TrunkEvent] { events.all }
}

/// The trunk events relays report, from their loops' threads.
final class TrunkEventLog: Sendable {
    private let events = Mutex<[TrunkEvent]>([])
    func append(_ event: TrunkEvent) { events.withLock { $0.append(event) } }
    var all: [TrunkEvent] { events.withLock { $0 } }
}

extension SecureMember {
    /// Asks the relay `request` as a moderator, and runs `members` (this one among them)
    /// until its answer comes; nil when none came within `timeout` seconds.
    func moderationAnswer(to request: ControlMessage.ModerationRequest, pumping members: [SecureMember], timeout: Double = 3) -> ControlMessage.ModerationReply? {
        let (sequence, output) = link.moderate(request, now: clock())
        take(output)
        var reply: ControlMessage.ModerationReply?
        pumpAll(members, timeout: timeout) {
            reply = events.lazy.compactMap { event -> ControlMessage.ModerationReply? in
                if case let .moderationAnswered(answered, reply) = event, answered == sequence { return reply }
                return nil
            }.first
            return reply != nil
        }
        return reply
    }
}

/// Runs every member's link for `seconds`.
func pumpAll(_ members: [SecureMember], seconds: Double) {
    let end = now() + seconds
    while now() < end { for member in members { member.pump(timeout: 0.005) } }
}

/// Runs every member's link until `condition` holds or `timeout` passes.
@discardableResult
func pumpAll(_ members: [SecureMember], timeout: Double, until condition: () -> Bool) -> Bool {
    let end = now() + timeout
    while now() < end {
        if condition() { return true }
        for member in members { member.pump(timeout: 0.005) }
    }
    return condition()
}

extension RelayOverUDP {
    @Suite("Trunks between relays") struct TrunkTests {
        func joined(_ members: [SecureMember], rosterSize: Int) throws {
            guard pumpAll(members, timeout: 8, until: { members.allSatisfy { $0.isActive && $0.link.roster.count == rosterSize } }) else {
                throw TestFailure("members did not all see \(rosterSize) in the roster: "
                    + members.map { "\($0.link.phase) \($0.link.roster.map(\.identity))" }.joined(separator: "; "))
            }
        }

        @Test func membersOnTwoRelaysHearEachOtherExactlyOnceAndShareOneRoster() throws {
            let trio = try RelayTrio(count: 2)
            defer { trio.shutdown() }
            let members = [trio.member(on: 0, room: "standup", identity: "ada"), trio.member(on: 0, room: "standup", identity: "bob"),
                           trio.member(on: 1, room: "standup", identity: "cy")]
            try trio.openTrunk("standup", from: 0, to: 1)
            #expect(trio.waitForOpenTrunks(1, on: [0, 1]))
            try joined(members, rosterSize: 3)
            for member in members { #expect(Set(member.link.roster.map(\.identity)) == ["ada", "bob", "cy"]) }
            for _ in 0..<20 {
                for member in members { member.sendMedia() }
                pumpAll(members, seconds: 0.02)
            }
            pumpAll(members, seconds: 0.5)
            for receiver in members {
                for sender in members where sender !== receiver {
                    #expect(receiver.received(from: sender.link.ssrc) == Array(1...20), "every packet once, in order, across the trunk or not")
                }
                #expect(receiver.received(from: receiver.link.ssrc).isEmpty)
            }
            #expect(trio.recordedEvents.filter { $0.change == .opened }.count == 2, "both ends report the trunk open")
            let metrics = try trio.fixtures[0].relay.metricsText()
            #expect(metricValue(metrics, "parley_relay_trunks") == 1)
            #expect(metricValue(metrics, #"parley_relay_members{state="remote"}"#) == 1)
            #expect(metricValue(metrics, #"parley_relay_members{state="active"}"#) == 2)
        }

        @Test func eachStreamCrossesTheTrunkOnceWhateverTheListenersBehindIt() throws {
            let trio = try RelayTrio(count: 2)
            defer { trio.shutdown() }
            let talker = trio.member(on: 0, room: "lecture", identity: "speaker")
            let listeners = (0..<3).map { trio.member(on: 1, room: "lecture", identity: "listener-\($0)") }
            try trio.openTrunk("lecture", from: 0, to: 1)
            try joined([talker] + listeners, rosterSize: 4)
            let sentBefore = metricValue(try trio.fixtures[0].relay.metricsText(), #"parley_relay_packets_sent_total{kind="media"}"#) ?? 0
            for _ in 0..<50 {
                talker.sendMedia()
                pumpAll([talker] + listeners, seconds: 0.01)
            }
            pumpAll([talker] + listeners, seconds: 0.5)
            for listener in listeners { #expect(listener.received(from: talker.link.ssrc) == Array(1...50)) }
            let sent = (metricValue(try trio.fixtures[0].relay.metricsText(), #"parley_relay_packets_sent_total{kind="media"}"#) ?? 0) - sentBefore
            let relayed = (metricValue(try trio.fixtures[1].relay.metricsText(), #"parley_relay_packets_sent_total{kind="media"}"#) ?? 0)
            #expect(sent == 50, "the talker's relay wrote each packet once, to the trunk, for three listeners behind it")
            #expect(relayed == 150, "the far relay wrote one copy per listener")
        }

        @Test func threeRelaysFormAMeshAndEveryoneHearsEveryoneOnce() throws {
            let trio = try RelayTrio(count: 3)
            defer { trio.shutdown() }
            let members = (0..<3).map { trio.member(on: $0, room: "mesh", identity: "m\($0)") }
            try trio.openTrunk("mesh", from: 0, to: 1)
            try trio.openTrunk("mesh", from: 0, to: 2)
            try trio.openTrunk("mesh", from: 2, to: 1)
            // Opening a trunk that is open (from either end) changes nothing.
            try trio.openTrunk("mesh", from: 1, to: 0)
            #expect(trio.waitForOpenTrunks(2, on: [0, 1, 2]))
            try joined(members, rosterSize: 3)
            for _ in 0..<20 {
                for member in members { member.sendMedia() }
                pumpAll(members, seconds: 0.02)
            }
            pumpAll(members, seconds: 0.5)
            for receiver in members {
                for sender in members where sender !== receiver {
                    #expect(receiver.received(from: sender.link.ssrc) == Array(1...20), "once: nothing loops round the third relay")
                }
            }
        }

        /// Texts are the room's, like its roster: each member's reaches every other member once,
        /// whichever relay either is on, and a member's own texts arrive in the order written.
        @Test func textsReachTheMembersOfEveryRelayOfTheRoomExactlyOnce() throws {
            let trio = try RelayTrio(count: 3)
            defer { trio.shutdown() }
            let members = (0..<3).map { trio.member(on: $0, room: "chat", identity: "m\($0)") }
            try trio.openTrunk("chat", from: 0, to: 1)
            try trio.openTrunk("chat", from: 0, to: 2)
            try trio.openTrunk("chat", from: 1, to: 2)
            #expect(trio.waitForOpenTrunks(2, on: [0, 1, 2]))
            try joined(members, rosterSize: 3)
            for round in 1...3 {
                for member in members { try member.say("hello \(round)") }
                pumpAll(members, seconds: 0.05)
            }
            pumpAll(members, timeout: 5) { members.allSatisfy { $0.texts.count >= 6 } }
            pumpAll(members, seconds: 0.5)  // anything sent twice would arrive by now
            for (index, member) in members.enumerated() {
                let others = (0..<3).filter { $0 != index }
                for other in others {
                    #expect(member.texts.filter { $0.hasPrefix("m\(other): ") } == (1...3).map { "m\(other): hello \($0)" },
                            "m\(index) hears m\(other)'s texts once each, in order: \(member.texts)")
                }
                #expect(!member.texts.contains { $0.hasPrefix("m\(index): ") }, "nobody hears their own")
            }
        }

        /// A moderator on one relay acts on a member of another: server-muted, the member is
        /// heard by nobody and every roster says so; kicked, it is gone from every roster and
        /// its ban holds on every relay of the room, not only its own.
        @Test func aModeratorOnOneRelayMutesAndKicksAMemberOnAnother() throws {
            let trio = try RelayTrio(count: 3)
            defer { trio.shutdown() }
            let moderator = trio.member(on: 0, room: "mod", identity: "chair", moderator: true)
            let loud = trio.member(on: 1, room: "mod", identity: "loud")
            let listener = trio.member(on: 2, room: "mod", identity: "ear")
            let members = [moderator, loud, listener]
            try trio.openTrunk("mod", from: 0, to: 1)
            try trio.openTrunk("mod", from: 0, to: 2)
            try trio.openTrunk("mod", from: 1, to: 2)
            #expect(trio.waitForOpenTrunks(2, on: [0, 1, 2]))
            try joined(members, rosterSize: 3)

            func ask(_ request: ControlMessage.ModerationRequest) -> ControlMessage.ModerationReply? {
                moderator.moderationAnswer(to: request, pumping: members)
            }
            func talk(_ frames: Int) {
                for _ in 0..<frames {
                    loud.sendMedia()
                    pumpAll(members, seconds: 0.02)
                }
                pumpAll(members, seconds: 0.3)
            }
            talk(10)
            #expect(listener.received(from: loud.link.ssrc).count == 10, "heard before the mute")

            let muted = try #require(ask(.init(action: .serverMute, target: "loud")))
            print("server-mute: \(muted.outcome) \(muted.message)")
            #expect(muted.outcome == .done)
            let shown = pumpAll(members, timeout: 3) {
                [moderator, listener].allSatisfy { $0.link.roster.first { $0.identity == "loud" }?.isServerMuted == true }
            }
            #expect(shown, "every roster shows the member on the other relay as muted by a moderator")
            let before = listener.received(from: loud.link.ssrc).count
            talk(10)
            #expect(listener.received(from: loud.link.ssrc).count == before, "nobody hears a server-muted member, wherever it is")

            let kicked = try #require(ask(.init(action: .kick, target: "loud", banSeconds: 60, reason: "testing")))
            print("kick: \(kicked.outcome) \(kicked.message)")
            #expect(kicked.outcome == .done)
            let gone = pumpAll(members, timeout: 3) {
                [moderator, listener].allSatisfy { !$0.link.roster.contains { $0.identity == "loud" } }
                    && loud.events.contains(where: { event in
                        if case .failed(.removed(.kicked, _)) = event { return true }
                        return false
                    })
            }
            #expect(gone, "removed from its relay, told why, and gone from every roster: \(loud.events.suffix(3))")
            // The ban holds on the relays that did not host it too.
            let again = trio.member(on: 2, room: "mod", identity: "loud")
            again.pump(timeout: 3) { $0.joinedOrFailed() }
            #expect(!again.isActive, "the kicked member cannot come back through another relay of the room: \(again.link.phase)")
        }

        /// The path between two relays goes down for longer than a trunk waits: each end gives
        /// the trunk up (its members leave the other's roster), the relay that opened it opens it
        /// again, and once the path is back the members hear each other again, every packet of
        /// what they said after it.
        @Test func aTrunkWhosePathWentDownIsOpenedAgainAndCarriesTheRoomOnceThePathIsBack() throws {
            var timings = RelayTrio.quickTimings
            timings.keepaliveMilliseconds = 200
            timings.timeoutMilliseconds = 600
            timings.openingTimeoutMilliseconds = 3_000
            let trio = try RelayTrio(count: 2, timings: timings)
            defer { trio.shutdown() }
            // Relay 0 reaches relay 1 only through a path the test can cut.
            let path = try PausableForwarder(host: "127.0.0.14", to: (host: "127.0.0.12", port: trio.fixtures[1].port))
            defer { path.stop() }
            let throughPath = RelayPeer(address: HostAndPort(host: path.address.host, port: path.address.port), publicKey: trio.fixtures[1].relayKey!.publicKey)
            // Relay 1 sees relay 0 at the path's address, and trusts it there (trunk inits are
            // taken only from where a trusted relay is registered).
            trio.fixtures[1].relay.setTrustedRelays([RelayPeer(address: HostAndPort(host: path.address.host, port: 1), publicKey: trio.fixtures[0].relayKey!.publicKey)])
            let members = [trio.member(on: 0, room: "link", identity: "ada"), trio.member(on: 1, room: "link", identity: "cy")]
            try trio.fixtures[0].relay.openTrunk(room: "link", to: throughPath)
            #expect(trio.waitForOpenTrunks(1, on: [0, 1]))
            try joined(members, rosterSize: 2)

            path.pause()
            let cut = now()
            let lost = pumpAll(members, timeout: 3) {
                trio.recordedEvents.filter { $0.change == .ended(.timedOut) }.count == 2 && members.allSatisfy { $0.link.roster.count == 1 }
            }
            print(String(format: "path down: both ends gave the trunk up after %.2f s", now() - cut))
            #expect(lost, "both ends end the trunk and its members leave the other's roster: \(trio.recordedEvents)")
            pumpAll(members, seconds: 0.4)
            path.resume()
            let back = now()
            let reopened = pumpAll(members, timeout: 5) { members.allSatisfy { $0.link.roster.count == 2 } }
            print(String(format: "path back: the room whole again after %.2f s", now() - back))
            #expect(reopened, "the opener opened the trunk again: \(trio.recordedEvents)")
            let (ada, cy) = (members[0], members[1])
            let (heardBefore, saidBefore) = (cy.received(from: ada.link.ssrc).count, ada.received(from: cy.link.ssrc).count)
            for _ in 0..<20 {
                for member in members { member.sendMedia() }
                pumpAll(members, seconds: 0.02)
            }
            pumpAll(members, seconds: 0.5)
            #expect(cy.received(from: ada.link.ssrc).count - heardBefore == 20 && ada.received(from: cy.link.ssrc).count - saidBefore == 20,
                    "each hears the other's 20 packets after the trunk is back")
        }

        /// A ban outlives the trunks that were open when it was made: a relay that joins the
        /// room later is told the room's running bans, so the kicked member cannot come back
        /// through it either.
        @Test func aRelayThatJoinsTheRoomLaterKeepsTheBansAlreadyMade() throws {
            let trio = try RelayTrio(count: 2)
            defer { trio.shutdown() }
            let chair = trio.member(on: 0, room: "late", identity: "chair", moderator: true)
            let rude = trio.member(on: 0, room: "late", identity: "rude")
            try joined([chair, rude], rosterSize: 2)
            let (_, output) = chair.link.moderate(.init(action: .kick, target: "rude", banSeconds: 120), now: chair.clock())
            chair.take(output)
            #expect(pumpAll([chair, rude], timeout: 3) { chair.link.roster.count == 1 })
            // Only now does the room span a second relay.
            let other = trio.member(on: 1, room: "late", identity: "other")
            try trio.openTrunk("late", from: 0, to: 1)
            #expect(trio.waitForOpenTrunks(1, on: [0, 1]))
            try joined([chair, other], rosterSize: 2)
            let again = trio.member(on: 1, room: "late", identity: "rude")
            again.pump(timeout: 3) { $0.joinedOrFailed() }
            guard case let .failed(failure) = again.link.phase else {
                Issue.record("the kicked member got back in through the relay that joined later: \(again.link.phase)")
                return
            }
            print("rejoining through the other relay: \(failure)")
            #expect("\(failure)".contains("chair removed you"))
        }

        /// Closing a room that spans relays closes it on every relay and takes its trunks with
        /// it, so a room of that name started afterwards is a new room, whole again once its
        /// trunk is opened.
        @Test func closingARoomThatSpansRelaysClosesItEverywhereAndEndsItsTrunks() throws {
            let trio = try RelayTrio(count: 3)
            defer { trio.shutdown() }
            let chair = trio.member(on: 0, room: "hall", identity: "chair", moderator: true)
            let members = [chair, trio.member(on: 1, room: "hall", identity: "b"), trio.member(on: 2, room: "hall", identity: "c")]
            try trio.openTrunk("hall", from: 0, to: 1)
            try trio.openTrunk("hall", from: 0, to: 2)
            try trio.openTrunk("hall", from: 1, to: 2)
            #expect(trio.waitForOpenTrunks(2, on: [0, 1, 2]))
            try joined(members, rosterSize: 3)
            let (_, output) = chair.link.moderate(.init(action: .closeRoom, reason: "done"), now: chair.clock())
            chair.take(output)
            let closed = pumpAll(members, timeout: 3) {
                members.allSatisfy { member in
                    member.events.contains(where: { event in
                        if case .failed(.removed(.roomClosed, _)) = event { return true }
                        return false
                    })
                }
            }
            #expect(closed, "everyone, on every relay, is told the room closed: \(members.map { $0.link.phase })")
            #expect(trio.waitForOpenTrunks(0, on: [0, 1, 2], timeout: 4), "the room's trunks end with it: \(trio.fixtures.map { $0.relay.openTrunks.count })")
            for fixture in trio.fixtures {
                let metrics = try fixture.relay.metricsText()
                #expect(metricValue(metrics, "parley_relay_trunks") == 0 && metricValue(metrics, #"parley_relay_members{state="remote"}"#) == 0)
            }
            // The room again, from scratch: a new trunk, a whole roster.
            let again = [trio.member(on: 0, room: "hall", identity: "d"), trio.member(on: 1, room: "hall", identity: "e")]
            try trio.openTrunk("hall", from: 0, to: 1)
            #expect(trio.waitForOpenTrunks(1, on: [0, 1]))
            try joined(again, rosterSize: 2)
        }

        /// A relay taken out of another's trusted set (retired, or gone from the cluster) loses
        /// its open trunks too once the grace has passed, not only the right to open new ones:
        /// its members leave the room's roster and it hears the room no more.
        @Test func aPeerTakenOutOfTheTrustedSetLosesItsOpenTrunksAfterTheGrace() throws {
            var timings = RelayTrio.quickTimings
            timings.distrustGraceMilliseconds = 300
            let trio = try RelayTrio(count: 2, timings: timings)
            defer { trio.shutdown() }
            let members = [trio.member(on: 0, room: "trust", identity: "ada"), trio.member(on: 1, room: "trust", identity: "cy")]
            try trio.openTrunk("trust", from: 0, to: 1)
            #expect(trio.waitForOpenTrunks(1, on: [0, 1]))
            try joined(members, rosterSize: 2)
            let removed = now()
            trio.fixtures[1].relay.setTrustedRelays([])
            let closed = pumpAll(members, timeout: 3) { members.allSatisfy { $0.link.roster.count == 1 } }
            print(String(format: "trunk to the distrusted relay closed after %.2f s", now() - removed))
            #expect(closed && trio.recordedEvents.contains { $0.change == .ended(.noLongerTrusted) }, "\(trio.recordedEvents)")
            // It cannot come back while it is not trusted.
            try trio.openTrunk("trust", from: 0, to: 1)
            pumpAll(members, seconds: 1)
            #expect(trio.fixtures[1].relay.openTrunks.isEmpty && members[1].link.roster.count == 1)
        }

        @Test func aRelayWithoutThePeersKeyInItsTrustedSetRefusesTheTrunk() throws {
            // Relay 1 trusts a stranger's key, registered at relay 0's address: relay 0's init
            // comes from where a trusted relay is, and its key is refused after one Diffie-Hellman.
            let trio = try RelayTrio(count: 2, trusts: [[1], []])
            defer { trio.shutdown() }
            trio.fixtures[1].relay.setTrustedRelays([RelayPeer(address: trio.peers[0].address, publicKey: RelayKey().publicKey)])
            let members = [trio.member(on: 0, room: "private", identity: "ada"), trio.member(on: 1, room: "private", identity: "bob")]
            try trio.openTrunk("private", from: 0, to: 1)
            try joined(members, rosterSize: 1)
            pumpAll(members, timeout: 3) { trio.recordedEvents.contains { $0.change == .ended(.unanswered) } }
            #expect(trio.recordedEvents.map(\.change) == [.ended(.unanswered)], "the opener is told; the refusing relay opened nothing")
            #expect(trio.fixtures[1].relay.openTrunks.isEmpty && trio.fixtures[0].relay.openTrunks.isEmpty)
            let refused = metricValue(try trio.fixtures[1].relay.metricsText(), #"parley_relay_packets_dropped_total{reason="trunk_untrusted"}"#)
            #expect((refused ?? 0) >= 1)
            for _ in 0..<5 { members[0].sendMedia() }
            pumpAll(members, seconds: 0.3)
            #expect(members[1].received(from: members[0].link.ssrc).isEmpty)
            #expect(members.allSatisfy { $0.link.roster.count == 1 })
        }

        /// Anyone can fetch an address cookie; a trunk init costs its receiver a Diffie-Hellman.
        /// So a stranger's inits are dropped before any: a relay that trusts no key takes none,
        /// and one that trusts relays takes them only from those relays' registered addresses.
        @Test func aStrangersTrunkInitsAreDroppedBeforeAnyDiffieHellman() throws {
            let trio = try RelayTrio(count: 2)
            defer { trio.shutdown() }
            let alone = try RelayFixture.startSecure { $0.listen = HostAndPort(host: "127.0.0.14", port: 0) }
            defer { alone.relay.shutdown() }
            let targets = [("a relay of a cluster", trio.fixtures[0], "127.0.0.11"), ("a relay that trusts no key", alone, "127.0.0.14")]
            for (what, target, host) in targets {
                let stranger = TestClient(relayPort: target.port, relayHost: host, localHost: "127.0.0.9")
                var sent = 0
                for _ in 0..<20 {
                    var opener = TrunkOpener(relayKey: RelayKey(), peerPublicKey: target.relayKey!.publicKey)
                    stranger.send(opener.helloBytes)
                    guard let cookie = stranger.receiveRaw(timeout: 1) else { break }
                    let opening = try TrunkOpening(room: "intrude").serialized()
                    stranger.send(try cookie.withUnsafeBytes { try opener.makeInit(cookieReply: $0, payload: opening) })
                    sent += 1
                }
                #expect(sent == 20, "\(what): the stranger got its cookies")
                usleep(300_000)
                let metrics = try target.relay.metricsText()
                let afterOne = metricValue(metrics, #"parley_relay_packets_dropped_total{reason="trunk_untrusted"}"#) ?? 0
                let beforeAny = metricValue(metrics, #"parley_relay_packets_dropped_total{reason="trunk_unknown_source"}"#) ?? 0
                print("\(what): of \(sent) trunk inits from a stranger, \(Int(beforeAny)) dropped before any Diffie-Hellman, \(Int(afterOne)) after one")
                #expect(afterOne == 0 && beforeAny == Double(sent), "\(what): every init dropped before a Diffie-Hellman")
                #expect(target.relay.openTrunks.isEmpty)
            }
            // The relay the cluster registered at that address still opens its trunk.
            try trio.openTrunk("intrude", from: 1, to: 0)
            #expect(trio.waitForOpenTrunks(1, on: [0, 1]), "a trusted relay's trunk opens: \(trio.recordedEvents)")
        }

        @Test func theTrunkClosesOnceTheRoomEmptiesOnOneSideAndTheOtherSideForgetsItsMembers() throws {
            let trio = try RelayTrio(count: 2)
            defer { trio.shutdown() }
            let stays = trio.member(on: 0, room: "brief", identity: "stays")
            let leaves = trio.member(on: 1, room: "brief", identity: "leaves")
            try trio.openTrunk("brief", from: 0, to: 1)
            try joined([stays, leaves], rosterSize: 2)
            leaves.leave()
            leaves.pump(timeout: 0.5)
            let ended = pumpAll([stays], timeout: 4) {
                trio.recordedEvents.contains { $0.change == .ended(.roomEmptied) } && trio.recordedEvents.contains { $0.change == .ended(.closedByPeer) }
            }
            #expect(ended, "events: \(trio.recordedEvents)")
            #expect(trio.fixtures[0].relay.openTrunks.isEmpty && trio.fixtures[1].relay.openTrunks.isEmpty)
            #expect(trio.fixtures[1].relay.rooms["brief"] == nil, "the emptied relay closed the room")
            pumpAll([stays], timeout: 2) { stays.link.roster.count == 1 }
            #expect(stays.link.roster.map(\.identity) == ["stays"])
        }

        @Test func aRelayShuttingDownEndsItsTrunksAndTheirMembersLeaveTheOtherRelaysRoster() throws {
            let trio = try RelayTrio(count: 2)
            defer { trio.fixtures[0].relay.shutdown() }
            let stays = trio.member(on: 0, room: "r", identity: "stays")
            let gone = trio.member(on: 1, room: "r", identity: "gone")
            try trio.openTrunk("r", from: 1, to: 0)
            try joined([stays, gone], rosterSize: 2)
            trio.fixtures[1].relay.shutdown()
            pumpAll([stays], timeout: 3) { stays.link.roster.count == 1 }
            #expect(stays.link.roster.map(\.identity) == ["stays"])
            #expect(trio.recordedEvents.contains { $0.change == .ended(.peerShuttingDown) && $0.openedHere == false })
        }

        @Test func anSSRCClashAcrossRelaysEndsWithBothMembersHeardUnderDifferentSSRCs() throws {
            let trio = try RelayTrio(count: 2)
            defer { trio.shutdown() }
            let members = [trio.member(on: 0, room: "clash", identity: "ada", ssrc: 4242), trio.member(on: 1, room: "clash", identity: "bob", ssrc: 4242)]
            try joined(members, rosterSize: 1)
            try trio.openTrunk("clash", from: 0, to: 1)
            try joined(members, rosterSize: 2)
            #expect(members[0].link.ssrc != members[1].link.ssrc)
            let lowerKeyFirst = trio.peers[0].publicKey.lexicographicallyPrecedes(trio.peers[1].publicKey)
            #expect(members[lowerKeyFirst ? 0 : 1].link.ssrc == 4242, "the member on the relay whose key sorts first keeps its SSRC")
            for _ in 0..<10 {
                for member in members { member.sendMedia() }
                pumpAll(members, seconds: 0.02)
            }
            pumpAll(members, seconds: 0.4)
            #expect(members[0].received(from: members[1].link.ssrc).count >= 9)
            #expect(members[1].received(from: members[0].link.ssrc).count >= 9)
        }

        @Test func openingATrunkOnAnInsecureRelayOrForABadRoomSaysWhy() throws {
            let insecure = try RelayFixture.start()
            defer { insecure.relay.shutdown() }
            let peer = RelayPeer(address: HostAndPort(host: "127.0.0.2", port: 7800), publicKey: RelayKey().publicKey)
            #expect(throws: ConfigurationError.self) { try insecure.relay.openTrunk(room: "r", to: peer) }
            let secure = try RelayFixture.startSecure()
            defer { secure.relay.shutdown() }
            #expect(throws: ConfigurationError.self) { try secure.relay.openTrunk(room: "no spaces", to: peer) }
        }
    }
}
