import Logging
import NIOCore
import NIOPosix
import ParleyBasics
import ParleySecurity
import Synchronization

/// A running relay: its loops (one thread and one UDP socket each, all on the same port),
/// the admin HTTP server, and graceful shutdown.
///
/// ```swift
/// let relay = try Relay.start(configuration: configuration, secret: secret, logger: logger)
/// // … later, on SIGTERM:
/// relay.shutdown()   // members are told goodbye, then the sockets close
/// ```
public final class Relay: Sendable {
    public let configuration: RelayConfiguration
    public let metrics: RelayMetrics
    /// The UDP address clients send to (with the real port when 0 was asked for).
    public let localAddress: SocketAddress
    /// The admin server's address, when it runs.
    public let adminAddress: SocketAddress?

    let core: RelayCore
    /// Token secret, handshake and replay cache, shared by the loops.
    let joins: JoinVerifier
    /// One per thread, by index; never changes after start.
    let workers: [RelayWorker]
    /// Trunks to other relays (`Relay+Trunks.swift`); nil on an `--insecure` relay.
    let trunkDirectory: TrunkDirectory?
    /// This relay's membership of a cluster, when it was started with one.
    public let cluster: ClusterMember?
    /// The admin server's event loop, when it runs (the forwarding loops are ``RelayLoop``s
    /// of their own).
    private let adminGroup: MultiThreadedEventLoopGroup?
    private let admin: AdminServer?
    private let lifecycle = Lifecycle()
    let logger: Logger

    enum State { case running, shuttingDown, stopped }

    /// The relay's state in a class of its own, so closures (the admin server's) can share it.
    final class Lifecycle: Sendable {
        let state = Mutex(State.running)
    }

    /// Binds every socket and starts forwarding. Throws if an address cannot be bound.
    public static func start(
        configuration: RelayConfiguration,
        secret: TokenSecret,
        relayKey: RelayKey? = nil,
        adminToken: AdminToken? = nil,
        logger: Logger,
        metrics: RelayMetrics = RelayMetrics()
    ) throws -> Relay {
        try configuration.validate()
        guard configuration.insecure || relayKey != nil else {
            throw ConfigurationError(
                "the secret file has no relay-private-key line, so the relay cannot run encrypted; "
                    + "make a new secret file with `parley-relay keygen --out FILE --force` (old invites stop working), "
                    + "or run with --insecure on a trusted network only")
        }
        return try Relay(configuration: configuration, secret: secret, relayKey: relayKey, adminToken: adminToken, logger: logger, metrics: metrics)
    }

    private init(configuration: RelayConfiguration, secret: TokenSecret, relayKey: RelayKey?, adminToken: AdminToken?, logger: Logger,
                 metrics: RelayMetrics) throws {
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
        let core = RelayCore(limits: configuration.limits, metrics: metrics)
        let cluster = configuration.cluster.map { settings in
            ClusterMember(settings: settings, publicKey: configuration.insecure ? "" : relayKey?.publicKeyText ?? "", metrics: metrics, logger: logger,
                          hostedRooms: { core.roomSummary.mapValues(\.count) })
        }
        self.cluster = cluster
        var joins = JoinVerifier(
            secret: secret, handshake: configuration.insecure ? nil : relayKey.map { RelayHandshake(key: $0) },
            replayCache: HandshakeReplayCache(capacityPerEpoch: configuration.handshakeReplayCapacity))
        joins.cluster = cluster
        let relaySSRC = UInt32.random(in: 1 ... .max)
        if configuration.insecure {
            logger.warning("running WITHOUT encryption (--insecure): anyone on the path can listen to calls and read tokens; use this on trusted networks and for tests only")
        } else if let relayKey {
            logger.info("encrypted transport on; relay public key \(relayKey.publicKeyText)")
        }
        self.core = core
        self.joins = joins
        let trunkDirectory = configuration.insecure ? nil : relayKey.map(TrunkDirectory.init(relayKey:))
        self.trunkDirectory = trunkDirectory
        let workers = try (0..<configuration.threads).map { index in
            RelayWorker(index: index, loop: try RelayLoop(name: "relay-loop-\(index)", logger: logger), rooms: core, joins: joins,
                        relaySSRC: relaySSRC, configuration: configuration, metrics: metrics, logger: logger, trunkDirectory: trunkDirectory)
        }
        self.workers = workers
        core.attach(loops: workers)

        // The first socket picks the port (when 0 was asked for); the others join it.
        var address = try configuration.listen.socketAddress()
        do {
            for worker in workers {
                let descriptor = try RelaySocket.bound(to: address, bufferBytes: configuration.socketBufferBytes)
                worker.attach(descriptor: descriptor)
                if worker.index == 0 { address = try RelaySocket.localAddress(of: descriptor) }
            }
            Self.reportBufferSizes(workers[0], requested: configuration.socketBufferBytes, metrics: metrics, logger: logger)
            for worker in workers { try worker.start() }
        } catch {
            for worker in workers { worker.stop() }
            core.detachLoops()
            throw error
        }
        localAddress = address
        // Registered only once the sockets are bound: a relay the cluster sends clients to
        // must already be listening.
        cluster?.start()

        // The admin API's closure reaches the relay once it exists (at the end of this init).
        let box = RelayBox()
        if let adminAddress = configuration.admin {
            let lifecycle = self.lifecycle
            let adminGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            self.adminGroup = adminGroup
            let loop = adminGroup.next()
            if adminToken == nil {
                logger.notice("""
                    the admin API is off: the secret file has no admin-token line; /metrics and /healthz still answer. \
                    To turn it on, make a new secret file with `parley-relay keygen --out FILE --force` (old tokens stop working), \
                    or add a line `admin-token = <32 or more random characters>` to it and restart
                    """)
            }
            do {
                admin = try AdminServer.start(
                    address: try adminAddress.socketAddress(), group: adminGroup,
                    metrics: { [workers, metrics, address] in Self.scrape(workers: workers, metrics: metrics, port: address.port, on: loop) },
                    healthy: { lifecycle.state.withLock { $0 == .running } },
                    token: adminToken,
                    admin: { route, loop in
                        guard let relay = box.relay else { return loop.makeSucceededFuture(.error(503, "the relay is starting")) }
                        return relay.answer(route, on: loop)
                    },
                    logger: logger)
            } catch {
                cluster?.stop()
                for worker in workers { worker.stop() }
                core.detachLoops()
                try? adminGroup.syncShutdownGracefully()
                throw error
            }
            self.adminAddress = admin?.localAddress
        } else {
            adminGroup = nil
            admin = nil
            self.adminAddress = nil
        }
        box.set(self)
        // A cluster member tells the relay which trunks its rooms need and whom to trust.
        if trunkDirectory != nil {
            cluster?.setCascadeHandler { [weak self] plan in self?.follow(plan) }
        }
        logger.info("relay listening", metadata: [
            "udp": "\(Self.describe(localAddress))", "admin": "\(adminAddress.map(Self.describe) ?? "off")",
            "threads": "\(configuration.threads)", "max-rooms": "\(configuration.limits.maximumRooms)",
            "max-members-per-room": "\(configuration.limits.maximumMembersPerRoom)",
            "cluster": "\(configuration.cluster.map { "\($0.endpoint) as \($0.publicAddress)" } ?? "off")",
        ])
    }

    private static func reportBufferSizes(_ worker: RelayWorker, requested: Int, metrics: RelayMetrics, logger: Logger) {
        // Linux caps the request at net.core.rmem_max / wmem_max.
        let (receive, send) = RelaySocket.bufferSizes(of: worker.socketDescriptor)
        metrics.socketReceiveBuffer.record(receive)
        metrics.socketSendBuffer.record(send)
        if receive < requested || send < requested {
            logger.warning("the kernel granted smaller socket buffers than asked; bursts may be dropped", metadata: [
                "requested": "\(requested)", "receive": "\(receive)", "send": "\(send)",
                "fix": "sysctl -w net.core.rmem_max=\(requested) net.core.wmem_max=\(requested)",
            ])
        } else {
            logger.info("socket buffers", metadata: ["receive": "\(receive)", "send": "\(send)"])
        }
    }

    /// "127.0.0.1:7800" or "[::1]:7800", for people.
    static func describe(_ address: SocketAddress) -> String {
        HostPortText.format(host: address.ipAddress ?? "?", port: address.port)
    }

    /// Every loop adds its counts (a moment's work on each), then the exposition is built on
    /// `loop`, the admin server's, so a scrape never holds up forwarding while it formats.
    private static func scrape(workers: [RelayWorker], metrics: RelayMetrics, port: Int?, on loop: EventLoop) -> EventLoopFuture<[UInt8]> {
        let flushed = loop.makePromise(of: Void.self)
        let remaining = Mutex(workers.count)
        for worker in workers {
            worker.loop.execute {
                worker.flushStatistics()
                if remaining.withLock({ count -> Bool in count -= 1; return count == 0 }) { flushed.succeed(()) }
            }
        }
        return flushed.futureResult.map {
            if let port, let drops = KernelSocketDrops.count(port: port) { metrics.socketReceiveDrops.record(drops) }
            return metrics.exposition()
        }
    }

    /// Counts added by every loop, then the exposition; for tests and tools.
    public func metricsText() throws -> String {
        let loop = adminGroup?.next() ?? MultiThreadedEventLoopGroup.singleton.next()
        return String(decoding: try Self.scrape(workers: workers, metrics: metrics, port: localAddress.port, on: loop).wait(), as: UTF8.self)
    }

    /// The loop whose socket holds the session of a client at `address`, if any.
    public func loopIndex(of address: SocketAddress) -> Int? {
        guard let peer = PeerAddress(address) else { return nil }
        for worker in workers where worker.loop.submit({ worker.hasSession(at: peer) }) {
            return worker.index
        }
        return nil
    }

    /// Rooms and the identities of their active members.
    public var rooms: [String: [String]] { core.roomSummary }

    /// Tells every member goodbye (repeated until acknowledged or the grace period ends),
    /// then closes the sockets and stops the loops. Returns within grace + ~0.5 s.
    public func shutdown() {
        let proceed = lifecycle.state.withLock { state -> Bool in
            guard state == .running else { return false }
            state = .shuttingDown
            return true
        }
        guard proceed else { return }
        logger.notice("relay shutting down; telling members goodbye")
        let started = monotonicNanoseconds()
        // Leave the cluster first: its rooms are freed at once, so the members told goodbye
        // below are placed on another relay when they rejoin.
        cluster?.stop()
        core.beginShutdown()
        for worker in workers { worker.loop.execute { worker.beginShutdown() } }
        // Retransmissions run on the loops' ticks; wait for acks or the grace period.
        let grace = UInt64(configuration.shutdownGraceMilliseconds) * 1_000_000
        while monotonicNanoseconds() - started < grace {
            let outstanding = workers.reduce(0) { sum, worker in sum + worker.loop.submit { worker.unacknowledgedGoodbyes } }
            if outstanding == 0 && monotonicNanoseconds() - started > 100_000_000 { break }
            sleepNanoseconds(50_000_000)
        }
        for worker in workers { worker.loop.submit { worker.flushStatistics() } }
        lifecycle.state.withLock { $0 = .stopped }
        // The admin port first, so no scrape arrives while the loops stop.
        admin?.close()
        try? adminGroup?.syncShutdownGracefully()
        for worker in workers { worker.stop() }
        core.detachLoops()
        logger.notice("relay stopped")
    }
}

/// A weak reference to the relay for the admin server's closure, which is made before the
/// relay is (and must not keep it alive).
private final class RelayBox: Sendable {
    private struct Reference { weak var relay: Relay? }
    private let storage = Mutex(Reference())

    var relay: Relay? { storage.withLock { $0.relay } }
    func set(_ relay: Relay) { storage.withLock { $0.relay = relay } }
}
