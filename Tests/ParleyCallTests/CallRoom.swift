import Foundation
import Logging
import NIOCore
import NIOPosix
import ParleyAdmin
import ParleyAudio
import ParleyClient
import ParleyE2EE
import ParleyEvaluation
import ParleyNetSim
import ParleyRelay
import ParleySecurity
import ParleyWire
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A relay on 127.0.0.1 (in this process, real UDP), optionally behind the impairment
/// proxy, and a `CallSession` per talker of a `Conversation`, each fed its track in real
/// time and recording what it receives per speaker. What a test asserts on is what came
/// out: the recordings, set against the tracks with `SpeechComparison`. The calls are
/// encrypted, as every call is by default: the relay has a key pair and each client pins
/// its public key, as an invite's `&key=` makes it.
final class CallRoom: @unchecked Sendable {
    // @unchecked: `relay` is replaced only by `restartRelay`, which the test calls from one task.
    let secret = TokenSecret.random()
    let relayKey = RelayKey()
    let room: String
    private(set) var relay: Relay
    /// The relay's admin port, when the room has an admin token.
    private(set) var admin: AdminServer?
    let relayPort: Int
    private var proxyGroup: MultiThreadedEventLoopGroup?
    private(set) var proxy: ImpairmentProxy?
    let directory: String
    /// With one, the relay serves the admin API on a port of its own (``admin``).
    let adminToken: AdminToken?
    /// The relay and the clients talk without hop encryption, so a tap sees what the relay sees.
    let insecure: Bool
    /// The room is end-to-end encrypted: tokens say so, and each talker has an identity
    /// (``identities``) and takes part.
    let endToEnd: Bool
    /// Each talker's identity key, made on first use and kept for the room's life.
    let identities = Mutex<[String: IdentityKey]>([:])
    /// A forwarder in front of the relay that keeps every datagram both ways (`tap: true`).
    private(set) var tap: SpoofingFront?

    init(room: String = "standup", scenario: Scenario? = nil, seed: UInt64 = 7, adminToken: AdminToken? = nil,
         insecure: Bool = false, endToEnd: Bool = false, tap: Bool = false, acceptsBrowsers: Bool = false) async throws {
        self.room = room
        self.adminToken = adminToken
        self.insecure = insecure
        self.endToEnd = endToEnd
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-call-\(room)-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // A browser behind the proxy must be told the proxy's address as the relay's ICE
        // candidate (`--public-address`, as behind a NAT), so the proxy's port is chosen first.
        let proxyPort = scenario != nil && acceptsBrowsers ? try Self.freeUDPPort() : 0
        relay = try Self.startRelay(port: 0, secret: secret, relayKey: insecure ? nil : relayKey, acceptsBrowsers: acceptsBrowsers,
                                    browserCandidate: proxyPort == 0 ? nil : HostAndPort(host: "127.0.0.1", port: proxyPort))
        relayPort = relay.localAddress.port!
        admin = try startAdmin()
        if tap { self.tap = SpoofingFront(relayPort: relayPort, capture: true) }
        if let scenario {
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            // The proxy is the network here: it runs at the calls' priority (see startRelay).
            try await group.next().submit { _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, -11) }.get()
            proxyGroup = group
            let configuration = ImpairmentProxy.Configuration(
                listen: try SocketAddress(ipAddress: "127.0.0.1", port: proxyPort), relay: relay.localAddress,
                up: scenario.up, down: scenario.down, seed: seed)
            proxy = try await ImpairmentProxy.start(configuration, on: group.next()).get()
        }
    }

    static func startRelay(port: Int, secret: TokenSecret, relayKey: RelayKey?, host: String = "127.0.0.1", acceptsBrowsers: Bool = false,
                           browserCandidate: HostAndPort? = nil) throws -> Relay {
        var configuration = RelayConfiguration()
        configuration.acceptsBrowsers = acceptsBrowsers
        configuration.browserCandidate = browserCandidate
        configuration.insecure = relayKey == nil
        configuration.listen = HostAndPort(host: host, port: port)
        configuration.threads = 1
        configuration.shutdownGraceMilliseconds = 500
        var logger = Logger(label: "parley-call-test-relay")
        logger.logLevel = .error
        // The calls' audio and network threads ask for nice −11 so a busy machine does not
        // show up as network jitter; the relay's loop, which forwards every packet, gets the
        // same (Relay.start creates one thread per loop, named relay-loop-N). Without the
        // privilege nothing changes.
        let before = threadNames()
        let relay = try Relay.start(configuration: configuration, secret: secret, relayKey: relayKey, logger: logger)
        for (thread, name) in threadNames() where before[thread] == nil && name.hasPrefix("relay-loop") {
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(thread), -11)
        }
        return relay
    }

    /// A UDP port on 127.0.0.1 free a moment ago (the system's next ephemeral ports come
    /// after it, so another test taking it in between is unlikely).
    static func freeUDPPort() throws -> Int {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard socket >= 0 else { throw SocketAddressError.unsupported }
        defer { Glibc.close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
        }
        guard bound else { throw SocketAddressError.unsupported }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// The relay's admin port on a free port, when the room has an admin token.
    private func startAdmin() throws -> AdminServer? {
        guard let adminToken else { return nil }
        return try AdminServer.start(serving: relay, at: HostAndPort(host: "127.0.0.1", port: 0), token: adminToken, logger: Logger(label: "parley-call-test-admin"))
    }

    /// This process's threads and their names, from /proc.
    static func threadNames() -> [Int32: String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        var names: [Int32: String] = [:]
        for task in tasks {
            guard let id = Int32(task) else { continue }
            names[id] = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        }
        return names
    }

    /// Where clients send: the proxy when there is one, else the tap when there is one.
    var clientPort: Int { proxy?.localAddress.port ?? tap?.port ?? relayPort }

    func token(_ identity: String, moderator: Bool = false) -> String {
        let now = Int64(Date().timeIntervalSince1970)
        return AccessToken(identity: identity, room: room, issuedAt: now, expiresAt: now + 3_600, isModerator: moderator,
                           endToEndEncrypted: endToEnd).signed(with: secret)
    }

    /// `talker`'s identity, made the first time it is asked for.
    func identity(of talker: String) -> IdentityKey {
        identities.withLock { keys in
            if let key = keys[talker] { return key }
            let key = IdentityKey()
            keys[talker] = key
            return key
        }
    }

    /// A call for `talker`, reading `input` and recording what it hears under the room's directory.
    func configuration(for talker: String, input: CallConfiguration.Input, durationSeconds: Double) -> CallConfiguration {
        var configuration = CallConfiguration(
            relayHost: "127.0.0.1", relayPort: clientPort, room: room, token: token(talker),
            security: insecure ? .insecure : .secure(relayKey: relayKey.publicKey))
        configuration.name = talker
        if endToEnd { configuration.endToEnd = EndToEndIdentity(identity: identity(of: talker), required: true) }
        configuration.input = input
        configuration.output = .wav(path: directory + "/\(talker)-heard.wav")
        configuration.recordReceivedDirectory = receivedDirectory(of: talker)
        configuration.durationSeconds = durationSeconds
        return configuration
    }

    func receivedDirectory(of talker: String) -> String { directory + "/\(talker)-received" }

    /// What `listener` recorded of `talker`.
    func received(by listener: String, from talker: String) throws -> [Float] {
        try WAVAudio(contentsOf: receivedDirectory(of: listener) + "/\(talker).wav").samples
    }

    /// Shuts the relay down (members are told goodbye) and starts a new one on the same port.
    func restartRelay(downFor seconds: Double) throws {
        relay.shutdown()
        admin?.close()
        Thread.sleep(forTimeInterval: seconds)
        relay = try Self.startRelay(port: relayPort, secret: secret, relayKey: insecure ? nil : relayKey)
        admin = try startAdmin()
    }

    func close() async {
        tap?.stop()
        if let proxy { _ = try? await proxy.stop().get() }
        try? await proxyGroup?.shutdownGracefully()
        relay.shutdown()
        admin?.close()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// One finished call of the conversation: every talker's session and figures.
struct CallOutcome: Sendable {
    let statistics: [String: CallStatistics]
    let results: [String: Result<CallStatistics, CallError>]

    /// Where `talker`'s capture began on `listener`'s playback timeline, in samples.
    func offset(talker: String, listener: String) -> Int? {
        guard let captured = statistics[talker]?.captureStartedAtNanoseconds,
              let played = statistics[listener]?.playbackStartedAtNanoseconds else { return nil }
        return Int(Int64(bitPattern: captured &- played) * 48_000 / 1_000_000_000)
    }
}

extension CallRoom {
    /// Runs one session per talker at once, each reading its track, and waits for all of them.
    /// The sessions block on threads of their own, never on the test's.
    func run(_ conversation: Conversation, extraSeconds: Double = 1.5,
             configure: @escaping @Sendable (String, inout CallConfiguration) -> Void = { _, _ in },
             whileRunning: (@Sendable () async throws -> Void)? = nil,
             notice: @escaping @Sendable (String, String) -> Void = { _, _ in },
             onSessions: (@Sendable ([String: CallSession]) -> Void)? = nil) async throws -> CallOutcome {
        var configurations: [String: CallConfiguration] = [:]
        for talker in Conversation.talkers {
            var configuration = configuration(for: talker, input: .wav(path: conversation.path(of: talker)), durationSeconds: conversation.seconds + extraSeconds)
            configure(talker, &configuration)
            configurations[talker] = configuration
        }
        return try await CallOutcome.run(configurations, whileRunning: whileRunning, notice: notice, onSessions: onSessions)
    }
}

extension CallOutcome {
    /// Runs one session per configuration at once and waits for all of them.
    static func run(_ configurations: [String: CallConfiguration],
                    whileRunning: (@Sendable () async throws -> Void)? = nil,
                    notice: @escaping @Sendable (String, String) -> Void = { _, _ in },
                    onSessions: (@Sendable ([String: CallSession]) -> Void)? = nil) async throws -> CallOutcome {
        var sessions: [String: CallSession] = [:]
        for talker in configurations.keys.sorted() {
            sessions[talker] = try CallSession(configurations[talker]!) { notice(talker, $0) }
        }
        onSessions?(sessions)
        async let during: Void = whileRunning?() ?? ()
        let results = await withTaskGroup(of: (String, Result<CallStatistics, CallError>).self) { group in
            for (talker, session) in sessions {
                group.addTask { (talker, await runOnThread { session.run() }) }
            }
            var results: [String: Result<CallStatistics, CallError>] = [:]
            for await (talker, result) in group { results[talker] = result }
            return results
        }
        try await during
        var statistics: [String: CallStatistics] = [:]
        for (talker, session) in sessions { statistics[talker] = session.statistics() }
        return CallOutcome(statistics: statistics, results: results)
    }
}

/// Runs blocking work on a thread of its own, so the test's cooperative threads stay free.
func runOnThread<Result: Sendable>(_ body: @escaping @Sendable () -> Result) async -> Result {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: body()) }
    }
}

/// At most `limit` slots' worth of calls run at once: each is real time, and two cores
/// carry only so many before scheduling delays would be measured as network delay. A call
/// heavier than one relay and its members (a cascade: three relays and their trunks) takes
/// more than one slot.
actor CallSlots {
    static let shared = CallSlots(limit: 3)
    private let limit: Int
    private var running = 0
    private var waiting: [(slots: Int, continuation: CheckedContinuation<Void, Never>)] = []
    /// Calls that want the machine to themselves (they load it on purpose, as an attack does);
    /// while one waits, no new call starts, so the running ones drain.
    private var waitingAlone: [CheckedContinuation<Void, Never>] = []

    init(limit: Int) { self.limit = limit }

    private func acquire(_ slots: Int) async {
        if running + slots <= limit, waitingAlone.isEmpty, waiting.isEmpty {
            running += slots
            return
        }
        await withCheckedContinuation { waiting.append((slots, $0)) }
    }

    private func release(_ slots: Int) {
        running -= slots
        admitWaiting()
    }

    private func acquireAlone() async {
        if running == 0 {
            running = limit
            return
        }
        await withCheckedContinuation { waitingAlone.append($0) }
    }

    private func releaseAlone() {
        running = 0
        admitWaiting()
    }

    /// Starts waiting calls in the order they asked (a heavy one is not overtaken for ever).
    private func admitWaiting() {
        if !waitingAlone.isEmpty {
            guard running == 0 else { return }
            running = limit
            waitingAlone.removeFirst().resume()
            return
        }
        while let first = waiting.first, running + first.slots <= limit {
            running += first.slots
            waiting.removeFirst().continuation.resume()
        }
    }

    /// Runs `body` with no other call running.
    func alone<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
        await acquireAlone()
        do {
            let result = try await body()
            releaseAlone()
            return result
        } catch {
            releaseAlone()
            throw error
        }
    }

    /// Runs `body` once `slots` (at most the limit) are free.
    func withSlot<T: Sendable>(_ slots: Int = 1, _ body: @Sendable () async throws -> T) async throws -> T {
        let slots = min(max(slots, 1), limit)
        await acquire(slots)
        do {
            let result = try await body()
            release(slots)
            return result
        } catch {
            release(slots)
            throw error
        }
    }
}
