import Dispatch
import Logging
import NIOCore
import NIOPosix
import ParleyBasics
import ParleyRelay
import ParleyWire
import Synchronization

/// This relay as a member of a cluster: its registration under a lease, the watch that keeps
/// its ``ClusterView`` current, and the claims that place rooms. It is the relay's
/// ``RoomPlacement``: the relay asks it where joins go, and follows the trunk plans it hands over.
///
/// ```swift
/// let metrics = RelayMetrics()
/// let member = try ClusterMember(settings: settings, metrics: ClusterMetrics(registry: metrics.registry), logger: logger)
/// let relay = try Relay.start(configuration: configuration, secret: secret, relayKey: key, placement: member, logger: logger, metrics: metrics)
/// ```
///
/// Nothing here is on the packet path, and the join path only reads the view under a lock:
/// a join for a room the view does not place starts a claim and is parked
/// (``route(room:region:whenDecided:)``), its loop resuming it when the claim is answered,
/// a few milliseconds later. Parking rather than waiting for the client's retransmission
/// saves the quarter second its first retransmission would take, and costs nothing the
/// relay does not bound: one claim in flight per room, a cap on parked joins.
///
/// When the store cannot be reached, everything placed goes on (the view stays as last
/// seen, and forwarding never asked it), joins for new rooms are refused with an error that
/// says so, and the member keeps trying: it renews its lease if the store still has it, or
/// registers again and claims back every room it still hosts.
///
/// A room spans relays when its members are in different regions (``ClusterView``): each
/// relay with members of a room records its presence there, and the relays present in a room
/// trunk to each other. The member works out which trunks this relay opens and whom it
/// trusts, and hands both to the relay (``ParleyRelay/TrunkPlan``) whenever they may change.
public final class ClusterMember: RoomPlacement, Sendable {
    public let settings: ClusterSettings
    public let selfRecordID: String
    let etcd: EtcdClient
    let metrics: ClusterMetrics
    let logger: Logger
    /// The relay this member places rooms for, once it started (``start(_:)``).
    let relay = Mutex<PlacedRelay?>(nil)
    let state: Mutex<State>
    private let group: MultiThreadedEventLoopGroup
    private let task = Mutex<Task<Void, Never>?>(nil)
    /// The newest trunk plan handed to the relay; plans are applied one at a time under it.
    let appliedPlan = Mutex<UInt64>(0)

    struct State {
        var view: ClusterView
        /// The store answered the last request, and the watch runs: the view is current.
        var storeReachable = false
        var lease: Int64?
        /// Joins waiting for a room's claim, by room.
        var parked: [String: [@Sendable (PlacementRoute) -> Void]] = [:]
        var parkedCount = 0
        /// When a room placed here was first seen without members.
        var emptySince: [String: UInt64] = [:]
        /// When a room this relay is present in was first seen without members here.
        var absentSince: [String: UInt64] = [:]
        /// Presence records being written, so a burst of joins writes one.
        var presenceInFlight: Set<String> = []
        /// Plans are numbered as made, so one made earlier is never applied after a later one.
        var planVersion: UInt64 = 0
        var lastReportedLoad = -1
        /// The watch runs (it is restarted, after a fresh read, when it ends).
        var watching = false
        /// When the watch last delivered anything, and when a canary was written because it
        /// had been quiet (``checkWatchIsAlive()``).
        var lastWatchNews: UInt64 = 0
        var canaryWritten: UInt64?
        var stopped = false
    }

    /// Joins parked at once, all rooms together; more are refused with "try again".
    static let maximumParkedJoins = 1024
    static let maximumParkedPerRoom = 64

    /// Reads the store's credentials (the error says which file and why); nothing is asked
    /// of the store before the relay starts it.
    public init(settings: ClusterSettings, metrics: ClusterMetrics, logger: Logger) throws(ConfigurationError) {
        try settings.validate()
        self.settings = settings
        self.metrics = metrics
        self.logger = logger
        selfRecordID = settings.publicAddress.description
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            etcd = try EtcdClient(
                endpoint: settings.endpoint, credentials: settings.credentials, group: group,
                requestTimeout: .milliseconds(Int64(settings.requestTimeoutMilliseconds))
            ) { nanoseconds, succeeded in
                metrics.storeRequestLatency.recordNanoseconds(Int64(clamping: nanoseconds))
                if !succeeded { metrics.storeErrors.increment() }
            }
        } catch {
            try? group.syncShutdownGracefully()
            throw error
        }
        self.group = group
        state = Mutex(State(view: ClusterView(selfID: settings.publicAddress.description, selfRegion: settings.region)))
    }

    /// The relay's key as registered; empty before it starts, and for a relay run `--insecure`.
    var publicKey: String { relay.withLock { $0?.publicKeyText ?? "" } }

    /// Rooms with active members here (room → count), as the relay reports them.
    func hostedRooms() -> [String: Int] { relay.withLock { $0 }?.hostedRooms() ?? [:] }

    // MARK: The join path

    /// Where `room` lives. `.pending` means a claim was started or joined; `whenDecided` is then
    /// called once with the answer, on the member's own thread.
    public func route(room: String, region: String?, whenDecided: @escaping @Sendable (PlacementRoute) -> Void) -> PlacementRoute {
        enum Next { case answer(PlacementRoute), resolve }
        let next: Next = state.withLock { state in
            switch state.view.route(room: room, region: region) {
            case .here: return .answer(.here)
            case let .elsewhere(relay): return .answer(Self.redirect(to: relay))
            case .unplaced:
                guard state.storeReachable else {
                    return .answer(.unavailable("the relay cannot reach its cluster's store to place a new room"))
                }
                guard state.parkedCount < Self.maximumParkedJoins, state.parked[room, default: []].count < Self.maximumParkedPerRoom else {
                    return .answer(.unavailable("the relay is placing many rooms at once"))
                }
                let first = state.parked[room] == nil
                state.parked[room, default: []].append(whenDecided)
                state.parkedCount += 1
                return first ? .resolve : .answer(.pending)
            }
        }
        switch next {
        case let .answer(route):
            if route == .here { recordPresence(in: room) }
            return route
        case .resolve:
            // A new room goes to the member's region: the token's, else this relay's (the
            // member chose it).
            Task { await self.place(room: room, region: region ?? self.settings.region) }
            return .pending
        }
    }

    public func routePinned(room: String, whenDecided: @escaping @Sendable (PlacementRoute) -> Void) -> PlacementRoute {
        guard state.withLock({ $0.view.routePinned(room: room) }) == .unplaced else { return pinnedRoute(room: room) }
        // Placed as any new room is (this relay's region); then asked again, which is here or
        // over a trunk to wherever the room went.
        let placed = route(room: room, region: nil) { [self] _ in whenDecided(pinnedRoute(room: room)) }
        switch placed {
        case .pending, .unavailable: return placed
        case .here, .elsewhere: return pinnedRoute(room: room)
        }
    }

    /// ``routePinned(room:whenDecided:)`` from the view as it is: a room that is (still, or
    /// again) unplaced has a relay on its way out.
    private func pinnedRoute(room: String) -> PlacementRoute {
        switch state.withLock({ $0.view.routePinned(room: room) }) {
        case .here:
            recordPresence(in: room)
            return .here
        case let .elsewhere(home):
            return .unavailable(Self.cannotJoinPinned(room: room, home: home))
        case .unplaced:
            return .unavailable("the room's relay is leaving the cluster; try again in a moment")
        }
    }

    static func cannotJoinPinned(room: String, home: ClusterRelayRecord) -> String {
        "\(room) is hosted on another relay of the cluster (\(home.address)) that this one cannot join over a trunk (one of them runs "
            + "without a key), and a browser can only join through the relay whose page it opened; open the page of that relay"
    }

    /// Other live relays, for a client to fall back to if this one goes away.
    public func fallbacks(limit: Int) -> [ControlMessage.ClusterRelay] {
        state.withLock { $0.view.others(limit: limit) }.compactMap(\.clientRelay)
    }

    /// A join sent to `relay`, or refused if its record cannot say where a client should go.
    static func redirect(to relay: ClusterRelayRecord) -> PlacementRoute {
        guard let client = relay.clientRelay else {
            return .unavailable("the room is on a relay this one cannot send you to (its key is unreadable)")
        }
        return .elsewhere(client)
    }

    /// Every live relay of the cluster as registered (this one included): their addresses
    /// and public keys are what relay-to-relay trunks trust.
    public var liveRelays: [ClusterRelayRecord] {
        state.withLock { $0.view.relays.values.sorted { $0.id < $1.id } }
    }

    /// A copy of the view, for tests and status.
    var view: ClusterView { state.withLock { $0.view } }

    /// Requests sent to the store so far (the benchmark counts store operations per join).
    public var storeRequests: Int { etcd.requestsSent }

    public var isRegistered: Bool { state.withLock { $0.lease != nil && $0.storeReachable } }

    /// Rooms the store places on this relay.
    public var roomsPlacedHere: [String] { state.withLock { $0.view.roomsHere.sorted() } }

    /// Claims `room` for the best live relay and answers every join parked on it.
    private func place(room: String, region: String?) async {
        let route = await claim(room: room, region: region)
        let waiting = state.withLock { state -> [@Sendable (PlacementRoute) -> Void] in
            let waiting = state.parked.removeValue(forKey: room) ?? []
            state.parkedCount -= waiting.count
            return waiting
        }
        if route == .here { recordPresence(in: room) }
        for resume in waiting { resume(route) }
    }

    func claim(room: String, region: String?) async -> PlacementRoute {
        let candidates = state.withLock { $0.view.candidates(for: room, region: region) }
        for candidate in candidates.prefix(3) {
            guard let lease = candidate.leaseID else { continue }
            let value = RoomPlacementRecord(relay: candidate.id).encoded
            do {
                let outcome = try await etcd.create(ClusterKeys.room(room), value: value, lease: lease)
                let entry: EtcdEntry
                switch outcome {
                case .created:
                    entry = EtcdEntry(key: ClusterKeys.room(room), value: value, lease: lease)
                    logger.info("room placed", metadata: ["room": "\(room)", "relay": "\(candidate.id)"])
                case let .exists(existing):
                    entry = existing
                }
                return state.withLock { state -> PlacementRoute in
                    state.view.apply(.put(entry))
                    switch state.view.route(room: room, region: region) {
                    case .here: return .here
                    case let .elsewhere(relay): return Self.redirect(to: relay)
                    case .unplaced: return .unavailable("the room's relay is leaving the cluster")
                    }
                }
            } catch EtcdError.leaseNotFound {
                // That relay died and the watch has not said so yet: the next one.
                state.withLock { $0.view.forgetRelay(candidate.id) }
            } catch {
                logger.warning("cannot place a room: the cluster's store did not answer", metadata: ["room": "\(room)", "error": "\(error)"])
                return .unavailable("the relay cannot reach its cluster's store to place a new room")
            }
        }
        return .unavailable("no relay of the cluster is available to host the room")
    }

    // MARK: Running

    /// Registers `relay` and keeps the registration, the view and the claims current until
    /// ``stop()``, handing it a trunk plan whenever the plan may have changed.
    public func start(_ relay: PlacedRelay) {
        self.relay.withLock { $0 = relay }
        updateTrunkPlan()
        task.withLock { $0 = Task { await self.run() } }
    }

    /// Leaves the cluster: the lease is revoked, so this relay's registration and rooms go
    /// at once instead of at its expiry (the members it told goodbye rejoin elsewhere).
    public func stop() {
        state.withLock { $0.stopped = true }
        let running = task.withLock { $0 }
        running?.cancel()
        // Wait for the loop to end (a request in flight is answered or times out) before the
        // event loop it uses goes away: a request left on a stopped loop would never complete.
        if let running {
            let ended = DispatchSemaphore(value: 0)
            Task {
                await running.value
                ended.signal()
            }
            _ = ended.wait(timeout: .now() + .milliseconds(2 * settings.requestTimeoutMilliseconds))
        }
        let lease = state.withLock { $0.lease }
        if let lease {
            let done = DispatchSemaphore(value: 0)
            Task {
                try? await etcd.revoke(lease: lease)
                done.signal()
            }
            _ = done.wait(timeout: .now() + .milliseconds(settings.requestTimeoutMilliseconds))
        }
        metrics.registered.record(0)
        // The store's connections close on this member's event loop: it may stop only once
        // they have (it takes a moment; a loop shut down under them would strand their work).
        let closed = DispatchSemaphore(value: 0)
        Task {
            await etcd.shutdown()
            closed.signal()
        }
        guard closed.wait(timeout: .now() + .seconds(5)) == .success else {
            logger.warning("the connections to the cluster's store did not close within 5 s; leaving their thread to end with the process")
            return
        }
        try? group.syncShutdownGracefully()
    }

    private var stopped: Bool { state.withLock { $0.stopped } }

    private func run() async {
        var failures = 0
        var watch: EtcdWatch?
        while !stopped {
            do {
                if state.withLock({ $0.lease }) == nil {
                    try await register()
                }
                if !state.withLock({ $0.watching }) {
                    watch?.cancel()
                    watch = try await startWatch()
                    state.withLock { $0.storeReachable = true }
                }
                await reconcile()
                await checkWatchIsAlive()
                if failures > 0 { logger.notice("the cluster's store answers again", metadata: ["store": "\(settings.endpoint)"]) }
                failures = 0
                metrics.registered.record(1)
                try await Task.sleep(nanoseconds: UInt64(settings.keepaliveMilliseconds) * 1_000_000)
                guard let lease = state.withLock({ $0.lease }) else { continue }
                try await etcd.keepAlive(lease: lease)
                state.withLock { $0.storeReachable = $0.watching }
            } catch is CancellationError {
                break
            } catch {
                if case EtcdError.leaseNotFound = error {
                    logger.warning("this relay's lease in the cluster expired; registering again and claiming back its rooms")
                    state.withLock { $0.lease = nil }
                }
                failures += 1
                // Trunks ended meanwhile are opened again from the last view.
                updateTrunkPlan()
                state.withLock { $0.storeReachable = false }
                metrics.registered.record(0)
                if failures == 1 || failures % 20 == 0 {
                    logger.warning("the cluster's store does not answer; calls go on, new rooms are refused until it does", metadata: [
                        "store": "\(settings.endpoint)", "error": "\(error)", "attempts": "\(failures)",
                    ])
                }
                try? await Task.sleep(nanoseconds: UInt64(settings.keepaliveMilliseconds) * 1_000_000)
            }
        }
        watch?.cancel()
    }

    /// A new lease and this relay's record under it. Another relay already registered with
    /// this public address (a different key) is a configuration error worth shouting about.
    private func register() async throws {
        let lease = try await etcd.grantLease(ttlSeconds: settings.leaseTTLSeconds)
        let load = hostedRooms().values.reduce(0, +)
        let record = ClusterRelayRecord(address: selfRecordID, key: publicKey, load: load, region: settings.region, lease: lease)
        if let existing = try await etcd.get(ClusterKeys.relay(selfRecordID)),
           let other = ClusterRelayRecord.decode(existing.value), other.key != publicKey {
            logger.error("another relay with a different key is registered at this public address; check --public-address on both", metadata: [
                "public-address": "\(selfRecordID)", "their-key": "\(other.key)",
            ])
            try? await etcd.revoke(lease: lease)
            throw EtcdError.refused(status: 409, code: nil, message: "public address \(selfRecordID) taken by another relay")
        }
        try await etcd.put(ClusterKeys.relay(selfRecordID), value: record.encoded, lease: lease)
        state.withLock {
            $0.lease = lease
            $0.lastReportedLoad = load
            // Presence written under an earlier lease went with it (or soon will): the
            // reconcile writes it again under this one.
            $0.view.forgetPresence(of: selfRecordID)
        }
        logger.notice("registered in the cluster", metadata: [
            "store": "\(settings.endpoint)", "public-address": "\(selfRecordID)", "region": "\(settings.region ?? "none")",
            "lease-ttl": "\(settings.leaseTTLSeconds)s",
        ])
    }

    /// A watch can die without ending: a connection half-open through a NAT or a firewall
    /// that forgot it delivers nothing and reports nothing, and the view would freeze while
    /// the lease (on another connection) keeps renewing. So when the watch has been quiet for
    /// ``watchQuietNanoseconds``, this relay writes a canary key (under its lease) that the
    /// watch must bring back; if it does not within ``canaryWaitNanoseconds``, the watch is
    /// started again after a fresh read. A busy cluster's own changes keep the watch from
    /// being quiet, so canaries are written only when nothing else moves.
    func checkWatchIsAlive() async {
        let now = MonotonicClock.now()
        enum Step { case none, writeCanary(lease: Int64), restart }
        let step: Step = state.withLock { state in
            guard state.watching, let lease = state.lease else { return .none }
            if let written = state.canaryWritten {
                guard now &- written > Self.canaryWaitNanoseconds else { return .none }
                state.watching = false
                state.canaryWritten = nil
                return .restart
            }
            guard now &- state.lastWatchNews > Self.watchQuietNanoseconds else { return .none }
            state.canaryWritten = now
            return .writeCanary(lease: lease)
        }
        switch step {
        case .none:
            break
        case let .writeCanary(lease):
            try? await etcd.put(ClusterKeys.canary(selfRecordID), value: Array("\(now)".utf8), lease: lease)
        case .restart:
            logger.warning("the cluster watch brought nothing back, not even this relay's own canary; reading the cluster again and watching anew",
                           metadata: ["store": "\(settings.endpoint)"])
        }
    }

    static let watchQuietNanoseconds: UInt64 = 5_000_000_000
    static let canaryWaitNanoseconds: UInt64 = 3_000_000_000

    /// Reads the whole cluster, then watches it from the next revision.
    private func startWatch() async throws -> EtcdWatch {
        let (revision, entries) = try await etcd.range(prefix: ClusterKeys.prefix)
        state.withLock {
            $0.view.reset(to: entries)
            $0.watching = true
            $0.lastWatchNews = MonotonicClock.now()
            $0.canaryWritten = nil
        }
        let logger = self.logger
        do {
            return try await openWatch(from: revision + 1, logger: logger)
        } catch {
            state.withLock { $0.watching = false }
            throw error
        }
    }

    private func openWatch(from revision: Int64, logger: Logger) async throws -> EtcdWatch {
        try await etcd.watch(
            prefix: ClusterKeys.prefix, fromRevision: revision,
            onChanges: { [weak self] changes, _ in
                self?.state.withLock { state in
                    for change in changes { state.view.apply(change) }
                    state.lastWatchNews = MonotonicClock.now()
                    state.canaryWritten = nil
                }
                self?.updateTrunkPlan()
            },
            onEnd: { [weak self] error in
                guard let self else { return }
                self.state.withLock {
                    $0.watching = false
                    $0.storeReachable = false
                }
                guard !self.stopped else { return }
                logger.notice("the cluster watch ended; reading the cluster again", metadata: ["reason": "\(error)"])
            })
    }
}
