import Foundation
import ParleyAudio
import ParleyBasics
import ParleyClient
import ParleyCluster
import ParleyRelay
import ParleySecurity
import Synchronization
import Testing

/// Issue 18's cluster, end to end: a real etcd, three `parley-relay` processes on 127.0.0.1,
/// .2 and .3, and real calls whose received audio is what the tests judge; each test twice,
/// with the store plain and with it behind TLS, a client certificate and an etcd user.
@Suite("A cluster of relays", .serialized)
struct ClusterCallTests {
    @Test(arguments: StoreSecurity.allCases)
    func roomsAreSpreadOverTheRelaysAndEveryMemberEndsOnItsRoomsRelay(store: StoreSecurity) async throws {
        let cluster = try await RelayCluster.started(security: store)
        defer { cluster.stop() }
        // Nine new rooms, every member sent to relay 1 as one invite would send them.
        var members: [String: ClusterLinkClient] = [:]
        for index in 0..<9 {
            let room = "room-\(index)"
            let member = ClusterLinkClient(via: cluster.relay(1), room: room, token: cluster.token("m\(index)", room: room))
            member.pump(timeout: 5) { $0.hasEnded }
            #expect(member.isActive, "\(room): \(member.link.phase), events \(member.events)")
            members[room] = member
        }
        var rooms: [String: Int] = [:]
        for (room, member) in members {
            let placed = try #require(try await cluster.placement(of: room))
            #expect(member.link.relayAddress == placed, "\(room) lives on \(placed), its member is on \(member.link.relayAddress)")
            rooms[placed, default: 0] += 1
        }
        print("rooms per relay: \(rooms.sorted { $0.key < $1.key })")
        #expect(rooms.count == 3, "every relay hosts rooms: \(rooms)")
        #expect(rooms.values.allSatisfy { (2...4).contains($0) }, "nine rooms spread evenly: \(rooms)")
    }

    /// Anyone who can write to the store can put a record there that no `joined` can carry (an
    /// address of 300 bytes): the relays skip it, and every join still gets its answer.
    @Test func aRelayRecordTooLongForAJoinedAnswerDoesNotStopJoins() async throws {
        let cluster = try await RelayCluster.started(relays: 2)
        defer { cluster.stop() }
        let address = String(repeating: "r", count: 290) + ".example:7800"
        let record = ClusterRelayRecord(address: address, key: RelayKey().publicKeyText, load: 0, region: nil, lease: 0)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        try await cluster.store.put("/parley/relays/\(address)", value: Array(try encoder.encode(record)))
        try await Task.sleep(for: .milliseconds(500))
        for index in 0..<4 {
            let room = "after-\(index)"
            let member = ClusterLinkClient(via: cluster.relay(1 + index % 2), room: room, token: cluster.token("m\(index)", room: room))
            member.pump(timeout: 5) { $0.hasEnded }
            #expect(member.isActive, "\(room): \(member.link.phase), events \(member.events)")
            #expect(!member.link.clusterRelays.contains { $0.address == address }, "the unusable record is not offered as a fallback")
        }
    }

    /// Alice's invite names relay 1, Bob's relay 2; the room lives on one relay, so at least one
    /// of them is redirected, by itself, and Bob hears Alice's tone from then on.
    @Test(arguments: StoreSecurity.allCases)
    func aMemberSentToTheWrongRelayHearsItsRoom(store: StoreSecurity) async throws {
        let cluster = try await RelayCluster.started(security: store)
        defer { cluster.stop() }
        let call = try ClusterCall(cluster: cluster, room: "standup", seconds: 6)
        let outcome = try await call.run([("alice", cluster.relay(1)), ("bob", cluster.relay(2))])
        let placed = try #require(try await cluster.placement(of: "standup"))
        print("standup on \(placed); notices: \(outcome.notices)")
        let redirected = outcome.notices.values.flatMap { $0 }.filter { $0.hasPrefix("the room lives on the relay at \(placed)") }
        #expect(!redirected.isEmpty, "someone was redirected to \(placed)")
        for (listener, talker) in [("bob", "alice"), ("alice", "bob")] {
            let heard = try call.audibility(of: talker, by: listener)
            let joinedAt = try #require(outcome.statistics[listener]?.playbackStartedAtNanoseconds)
            _ = joinedAt
            // From half a second in to the talker's end, the tone is heard all the time.
            let span = heard.dropFirst(50).prefix(450)
            let share = Double(span.filter { $0 }.count) / Double(max(1, span.count))
            print("\(listener) hears \(talker) \(Int(share * 100)) % of the time")
            #expect(share >= 0.95)
        }
    }

    /// Three members of one room in three regions, each with an invite to its region's relay:
    /// nobody is redirected, the three relays record their presence in the room and trunk to
    /// each other, and everyone hears everyone (a different tone each) all the time.
    @Test(arguments: StoreSecurity.allCases)
    func membersOfOneRoomOnRelaysInDifferentRegionsHearEachOtherOverTrunks(store: StoreSecurity) async throws {
        let cluster = try await RelayCluster.started(regions: [1: "eu", 2: "us", 3: "ap"], security: store)
        defer { cluster.stop() }
        let call = try ClusterCall(cluster: cluster, room: "world", seconds: 6, tones: ["alice": 440, "bob": 660, "carol": 880])
        // Each relay's own figures, mid-call.
        let midCall = Mutex<[Int: (trunks: Double?, remote: Double?)]>([:])
        let outcome = try await call.run([("alice", cluster.relay(1)), ("bob", cluster.relay(2)), ("carol", cluster.relay(3))],
                                         regions: ["alice": "eu", "bob": "us", "carol": "ap"]) {
            MonotonicClock.sleep(until: MonotonicClock.now() + 4_000_000_000)
            for member in cluster.relays {
                let figures = (cluster.metric("parley_relay_trunks", of: member), cluster.metric("parley_relay_members", of: member, labels: "state=\"remote\""))
                midCall.withLock { $0[member.index] = figures }
            }
        }
        let placed = try #require(try await cluster.placement(of: "world"))
        let present = try await cluster.presence(in: "world")
        print("world homed on \(placed), present on \(present.sorted()); notices: \(outcome.notices)")
        #expect(!outcome.notices.values.flatMap { $0 }.contains { $0.hasPrefix("the room lives on") }, "nobody was redirected")
        #expect(present == Set(cluster.relays.map(\.address)), "each relay has members of the room")
        for (index, figures) in midCall.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
            // A full mesh of three: each relay has a trunk to each of the other two, and the
            // other two members in its rooms' rosters.
            print("relay \(index) mid-call: \(figures.trunks.map { String(Int($0)) } ?? "?") trunks, \(figures.remote.map { String(Int($0)) } ?? "?") remote members")
            #expect(figures.trunks == 2 && figures.remote == 2, "relay \(index)")
        }
        for listener in ["alice", "bob", "carol"] {
            for talker in ["alice", "bob", "carol"] where talker != listener {
                let heard = try call.audibility(of: talker, by: listener)
                let span = heard.dropFirst(50).prefix(450)
                let share = Double(span.filter { $0 }.count) / Double(max(1, span.count))
                print("\(listener) hears \(talker) \(Int(share * 100)) % of the time")
                #expect(share >= 0.95, "\(listener) heard \(talker) only \(Int(share * 100)) % of the time")
            }
        }
        for talker in ["alice", "bob", "carol"] { #expect(outcome.statistics[talker]?.rejoins == 0) }
    }

    /// The same room over three regions, and the room's home relay SIGKILLed mid-call: the two
    /// members on the other relays go on hearing each other over their own trunk with no
    /// gap, and the home's member, with nothing from the user, rejoins on a surviving relay
    /// and hears both again within 3 s.
    @Test(arguments: StoreSecurity.allCases)
    func killingTheHomeOfARoomSpreadOverRegionsSilencesOnlyItsOwnMembersAndNotForLong(store: StoreSecurity) async throws {
        let cluster = try await RelayCluster.started(regions: [1: "eu", 2: "us", 3: "ap"], security: store)
        defer { cluster.stop() }
        let call = try ClusterCall(cluster: cluster, room: "spread", seconds: 10, tones: ["alice": 440, "bob": 660, "carol": 880])
        let names = ["alice", "bob", "carol"]
        let killed = Mutex<(index: Int, at: UInt64)?>(nil)
        let outcome = try await call.run([("alice", cluster.relay(1)), ("bob", cluster.relay(2)), ("carol", cluster.relay(3))],
                                         regions: ["alice": "eu", "bob": "us", "carol": "ap"]) {
            MonotonicClock.sleep(until: MonotonicClock.now() + 4_000_000_000)
            guard let home = try? blocking({ try await cluster.placement(of: "spread") }), let member = cluster.relay(at: home) else { return }
            killed.withLock { $0 = (member.index, MonotonicClock.now()) }
            cluster.kill(member)
        }
        let (homeIndex, kill) = try #require(killed.withLock { $0 })
        let moved = names[homeIndex - 1]
        print("killed relay \(homeIndex), home of the room and \(moved)'s relay; notices: \(outcome.notices)")
        for listener in names {
            for talker in names where talker != listener {
                let heard = try call.audibility(of: talker, by: listener)
                let started = try #require(outcome.statistics[listener]?.playbackStartedAtNanoseconds)
                let killWindow = Int((kill &- started) / 10_000_000)
                let after = heard[min(killWindow, heard.count)..<min(killWindow + 500, heard.count)]
                var longest = 0, run = 0
                for audible in after {
                    run = audible ? 0 : run + 1
                    longest = max(longest, run)
                }
                let resumed = (after.lastIndex(of: false).map { $0 + 1 } ?? killWindow) - killWindow
                print("\(listener) hears \(talker) after the kill: longest silence \(longest * 10) ms, last silent window \(resumed * 10) ms after it")
                if listener != moved && talker != moved {
                    #expect(longest <= 10, "\(listener) and \(talker) kept their relays: no more than 100 ms of silence")
                } else {
                    #expect(longest < 300, "\(listener) heard \(talker) again within 3 s of the kill")
                }
            }
        }
        #expect(outcome.statistics[moved]?.rejoins == 1, "\(moved) rejoined once, by itself")
        for name in names where name != moved { #expect(outcome.statistics[name]?.rejoins == 0) }
    }

    /// The relay hosting the room is SIGKILLed mid-call. Its members, with nothing from the
    /// user, rejoin through another relay, the room is placed again once the dead relay's lease
    /// expires, and each hears the other again within 3 s of the kill.
    @Test(arguments: StoreSecurity.allCases)
    func killingTheRoomsRelayLeavesItsMembersHearingEachOtherAgainWithinThreeSeconds(store: StoreSecurity) async throws {
        let cluster = try await RelayCluster.started(security: store)
        defer { cluster.stop() }
        let call = try ClusterCall(cluster: cluster, room: "failover", seconds: 10)
        let killedAt = Mutex<UInt64?>(nil)
        let killed = Mutex<String?>(nil)
        let outcome = try await call.run([("alice", cluster.relay(1)), ("bob", cluster.relay(1))]) {
            MonotonicClock.sleep(until: MonotonicClock.now() + 4_000_000_000)
            guard let host = try? blocking({ try await cluster.placement(of: "failover") }), let member = cluster.relay(at: host) else { return }
            killed.withLock { $0 = host }
            killedAt.withLock { $0 = MonotonicClock.now() }
            cluster.kill(member)
        }
        let host = try #require(killed.withLock { $0 })
        let kill = try #require(killedAt.withLock { $0 })
        let newHost = try #require(try await cluster.placement(of: "failover"))
        print("killed \(host); the room now lives on \(newHost); notices: \(outcome.notices)")
        #expect(newHost != host)
        for (listener, talker) in [("bob", "alice"), ("alice", "bob")] {
            let heard = try call.audibility(of: talker, by: listener)
            let started = try #require(outcome.statistics[listener]?.playbackStartedAtNanoseconds)
            let killWindow = Int((kill &- started) / 10_000_000)
            // The outage is the longest silence from the kill on (the jitter buffer plays what it
            // already held for a moment after it); speech resumes where it ends.
            var longest = (start: killWindow, length: 0), run = (start: killWindow, length: 0)
            for index in killWindow..<min(killWindow + 600, heard.count) {
                if heard[index] { run = (index + 1, 0) } else { run.length += 1 }
                if run.length > longest.length { longest = run }
            }
            let resumed = longest.start + longest.length
            #expect(resumed < heard.count && heard[resumed], "\(listener) never heard \(talker) again")
            let gap = Double(longest.length) / 100
            let afterKill = Double(resumed - killWindow) / 100
            let tail = heard[min(resumed, heard.count)..<min(resumed + 300, heard.count)]
            let share = Double(tail.filter { $0 }.count) / Double(max(1, tail.count))
            print(String(format: "%@ hears %@ again %.2f s after the kill (silence %.2f s); then %d %% of the time", listener, talker, afterKill, gap, Int(share * 100)))
            #expect(afterKill < 3, "\(listener) heard \(talker) again only \(afterKill) s after the kill")
            #expect(share >= 0.9)
        }
        for talker in ["alice", "bob"] {
            #expect(outcome.statistics[talker]?.rejoins == 1, "\(talker) rejoined once, by itself")
        }
    }

    /// etcd is SIGKILLed for two seconds in the middle of a call and comes back: the call
    /// hears no gap, a new room asked for meanwhile is refused with a reason, and afterwards
    /// the relays are registered again and new rooms are placed.
    @Test(arguments: StoreSecurity.allCases)
    func theStoreKilledAndRestartedLosesNothingFromARunningCall(store: StoreSecurity) async throws {
        let cluster = try await RelayCluster.started(security: store)
        defer { cluster.stop() }
        let call = try ClusterCall(cluster: cluster, room: "steady", seconds: 8)
        let refusal = Mutex<LinkFailure?>(nil)
        let outage = Mutex<(UInt64, UInt64)?>(nil)
        let outcome = try await call.run([("alice", cluster.relay(1)), ("bob", cluster.relay(2))]) {
            MonotonicClock.sleep(until: MonotonicClock.now() + 3_000_000_000)
            let down = MonotonicClock.now()
            cluster.etcd.kill()
            let newcomer = ClusterLinkClient(via: cluster.relay(3), room: "while-down", token: cluster.token("carol", room: "while-down"), joinTimeout: 1.5)
            newcomer.pump(timeout: 2) { $0.hasEnded }
            if case let .failed(failure) = newcomer.link.phase { refusal.withLock { $0 = failure } }
            try? cluster.etcd.start()
            outage.withLock { $0 = (down, MonotonicClock.now()) }
        }
        let (down, up) = try #require(outage.withLock { $0 })
        print(String(format: "store down for %.1f s", Double(up - down) / 1e9))
        let failure = try #require(refusal.withLock { $0 })
        #expect(failure == .refused(code: .placementUnavailable, message: "the relay cannot reach its cluster's store to place a new room"))
        print("a new room while the store is down: \(failure)")
        #expect(failure.description.components(separatedBy: "try again").count == 2, "what to do is said once: \(failure)")
        for (listener, talker) in [("bob", "alice"), ("alice", "bob")] {
            let heard = try call.audibility(of: talker, by: listener)
            let started = try #require(outcome.statistics[listener]?.playbackStartedAtNanoseconds)
            let from = Int((down &- started) / 10_000_000) - 50, to = Int((up &- started) / 10_000_000) + 100
            let span = heard[max(0, from)..<min(to, heard.count)]
            let longestSilence = span.split(separator: true).map(\.count).max() ?? 0
            print("\(listener) hears \(talker) through the outage: longest silence \(longestSilence * 10) ms")
            #expect(longestSilence <= 10, "no more than 100 ms of silence while the store was away")
        }
        #expect(outcome.statistics.values.allSatisfy { $0.rejoins == 0 })
        try await cluster.registrations(3)
        let later = ClusterLinkClient(via: cluster.relay(3), room: "after", token: cluster.token("dan", room: "after"))
        later.pump(timeout: 5) { $0.hasEnded }
        #expect(later.isActive, "a new room is placed once the store is back: \(later.link.phase)")
    }
}

/// A call of tone-talking members through the cluster, each recording what it hears.
struct ClusterCall: Sendable {
    let cluster: RelayCluster
    let room: String
    let seconds: Double
    let directory: String

    struct Outcome {
        var statistics: [String: CallStatistics]
        var notices: [String: [String]]
    }

    /// Each member talks a tone of its own frequency (`tones`, Hz; 440 for anyone not named).
    init(cluster: RelayCluster, room: String, seconds: Double, tones: [String: Double] = [:]) throws {
        self.cluster = cluster
        self.room = room
        self.seconds = seconds
        self.tones = tones
        directory = cluster.directory + "/call-\(room)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for frequency in Set(tones.values + [440]) {
            let writer = try WAVFileWriter(path: tonePath(frequency))
            try writer.append((0..<Int(seconds * 48_000)).map { 0.3 * Float(sin(Double($0) * 2 * Double.pi * frequency / 48_000)) })
            try writer.close()
        }
    }

    let tones: [String: Double]

    func tonePath(_ frequency: Double) -> String { directory + "/tone-\(Int(frequency)).wav" }

    /// Runs one session per member, each through the relay its invite names, with `during`
    /// on a thread of its own; waits for all.
    /// `regions` names the region a member's token asks for.
    func run(_ members: [(String, RelayCluster.Member)], regions: [String: String] = [:], during: (@Sendable () -> Void)? = nil) async throws -> Outcome {
        let notices = Mutex<[String: [String]]>([:])
        var sessions: [String: CallSession] = [:]
        for (name, relay) in members {
            let address = try HostAndPort(parsing: relay.address)
            var configuration = CallConfiguration(relayHost: address.host, relayPort: address.port, room: room, token: cluster.token(name, room: room, region: regions[name]),
                                                  security: .secure(relayKey: relay.key.publicKey))
            configuration.name = name
            configuration.input = .wav(path: tonePath(tones[name] ?? 440))
            configuration.output = .wav(path: directory + "/\(name)-heard.wav")
            configuration.recordReceivedDirectory = directory + "/\(name)-received"
            configuration.durationSeconds = seconds + 0.5
            sessions[name] = try CallSession(configuration) { message in notices.withLock { $0[name, default: []].append(message) } }
        }
        let background = during.map { work in Task { await onThread(work) } }
        await withTaskGroup(of: Void.self) { group in
            for session in sessions.values {
                group.addTask { _ = await onThread { session.run() } }
            }
        }
        await background?.value
        return Outcome(statistics: sessions.mapValues { $0.statistics() }, notices: notices.withLock { $0 })
    }

    /// Per 10 ms of what `listener` recorded of `talker`: whether the tone was audible.
    func audibility(of talker: String, by listener: String) throws -> [Bool] {
        let samples = try WAVAudio(contentsOf: directory + "/\(listener)-received/\(talker).wav").samples
        return stride(from: 0, to: samples.count - 479, by: 480).map { start in
            var sum: Float = 0
            for sample in samples[start..<start + 480] { sum += sample * sample }
            return (sum / 480).squareRoot() > 0.01
        }
    }
}
