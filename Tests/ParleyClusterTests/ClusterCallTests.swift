import Foundation
import ParleyAudio
import ParleyBasics
import ParleyClient
import ParleyRelay
import Synchronization
import Testing

/// Issue 18's cluster, end to end: a real etcd, three `parley-relay` processes on 127.0.0.1,
/// .2 and .3, and real calls whose received audio is what the tests judge.
@Suite("A cluster of relays", .serialized)
struct ClusterCallTests {
    @Test func roomsAreSpreadOverTheRelaysAndEveryMemberEndsOnItsRoomsRelay() async throws {
        let cluster = try RelayCluster()
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

    /// Alice's invite names relay 1, Bob's relay 2; the room lives on one relay, so at least one
    /// of them is redirected, by itself, and Bob hears Alice's tone from then on.
    @Test func aMemberSentToTheWrongRelayHearsItsRoom() async throws {
        let cluster = try RelayCluster()
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

    /// The relay hosting the room is SIGKILLed mid-call. Its members, with nothing from the
    /// user, rejoin through another relay, the room is placed again once the dead relay's lease
    /// expires, and each hears the other again within 3 s of the kill.
    @Test func killingTheRoomsRelayLeavesItsMembersHearingEachOtherAgainWithinThreeSeconds() async throws {
        let cluster = try RelayCluster()
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
    @Test func theStoreKilledAndRestartedLosesNothingFromARunningCall() async throws {
        let cluster = try RelayCluster()
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
        #expect(failure == .refused(code: .placementUnavailable, message: "the relay cannot reach its cluster's store to place a new room; try again in a few seconds"))
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
        try cluster.waitForRegistrations(3)
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
    let tone: String

    struct Outcome {
        var statistics: [String: CallStatistics]
        var notices: [String: [String]]
    }

    init(cluster: RelayCluster, room: String, seconds: Double) throws {
        self.cluster = cluster
        self.room = room
        self.seconds = seconds
        directory = cluster.directory + "/call-\(room)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        tone = directory + "/tone.wav"
        let writer = try WAVFileWriter(path: tone)
        try writer.append((0..<Int(seconds * 48_000)).map { 0.3 * Float(sin(Double($0) * 2 * Double.pi * 440 / 48_000)) })
        try writer.close()
    }

    /// Runs one session per member, each through the relay its invite names, with `during`
    /// on a thread of its own; waits for all.
    func run(_ members: [(String, RelayCluster.Member)], during: (@Sendable () -> Void)? = nil) async throws -> Outcome {
        let notices = Mutex<[String: [String]]>([:])
        var sessions: [String: CallSession] = [:]
        for (name, relay) in members {
            let host = String(relay.address.split(separator: ":")[0]), port = Int(relay.address.split(separator: ":")[1])!
            var configuration = CallConfiguration(relayHost: host, relayPort: port, room: room, token: cluster.token(name, room: room),
                                                  security: .secure(relayKey: relay.key.publicKey))
            configuration.name = name
            configuration.input = .wav(path: tone)
            configuration.output = .wav(path: directory + "/\(name)-heard.wav")
            configuration.recordReceivedDirectory = directory + "/\(name)-received"
            configuration.durationSeconds = seconds + 0.5
            sessions[name] = try CallSession(configuration) { message in notices.withLock { $0[name, default: []].append(message) } }
        }
        let background = during.map { work in Task.detached { work() } }
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

func onThread<Result: Sendable>(_ body: @escaping @Sendable () -> Result) async -> Result {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: body()) }
    }
}
