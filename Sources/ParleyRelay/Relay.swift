import Logging
import NIOCore
import NIOPosix
import ParleyBasics
import ParleyDatagrams
import ParleySecurity
import Synchronization

/// A running relay: its loops (one thread and one UDP socket each, all on the same port) and
/// graceful shutdown. What serves it over HTTP (`ParleyAdmin`'s `AdminServer`: /metrics,
/// /healthz, the admin API) and what places its rooms in a cluster (a ``RoomPlacement``) are
/// put beside it by whoever starts it (`parley-relay serve`), through its public API.
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

    let core: RelayCore
    /// Token secret, handshake and replay cache, shared by the loops.
    let joins: JoinVerifier
    /// One per thread, by index; never changes after start.
    let workers: [RelayWorker]
    /// Trunks to other relays (`Relay+Trunks.swift`); nil on an `--insecure` relay.
    let trunkDirectory: TrunkDirectory?
    /// Where rooms live, when this relay is one of a cluster; nil on a relay on its own.
    let placement: (any RoomPlacement)?
    /// Browser members' offers and the DTLS certificate, shared by the loops; nil when the
    /// relay takes no browsers.
    let browserEdge: BrowserEdge?
    private let lifecycle = Lifecycle()
    let logger: Logger

    enum State { case running, shuttingDown, stopped }

    /// The relay's state in a class of its own, so closures can share it.
    final class Lifecycle: Sendable {
        let state = Mutex(State.running)
    }

    /// Binds every socket and starts forwarding, then starts `placement` (a cluster's member),
    /// if any. Throws if an address cannot be bound.
    public static func start(
        configuration: RelayConfiguration,
        secret: TokenSecret,
        relayKey: RelayKey? = nil,
        placement: (any RoomPlacement)? = nil,
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
        let relay = try Relay(configuration: configuration, secret: secret, relayKey: relayKey, placement: placement, logger: logger, metrics: metrics)
        // Only once the sockets are bound: a relay the cluster sends clients to must already
        // be listening.
        placement?.start(PlacedRelay(
            publicKeyText: configuration.insecure ? "" : relayKey?.publicKeyText ?? "",
            hostedRooms: { [core = relay.core] in core.roomSummary.mapValues(\.count) },
            follow: { [weak relay] plan in relay?.follow(plan) }))
        return relay
    }

    /// The rooms, the join checks and one worker per loop, each loop's socket bound to the
    /// listening address (all on one port, SO_REUSEPORT), then the loops started.
    private init(configuration: RelayConfiguration, secret: TokenSecret, relayKey: RelayKey?, placement: (any RoomPlacement)?, logger: Logger,
                 metrics: RelayMetrics) throws {
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
        self.placement = placement
        if configuration.insecure {
            logger.warning("running WITHOUT encryption (--insecure): anyone on the path can listen to calls and read tokens; use this on trusted networks and for tests only")
        } else if let relayKey {
            logger.info("encrypted transport on; relay public key \(relayKey.publicKeyText)")
        }
        let core = RelayCore(limits: configuration.limits, metrics: metrics)
        let joins = JoinVerifier(
            secret: secret, handshake: configuration.insecure ? nil : relayKey.map { RelayHandshake(key: $0) },
            replayCache: HandshakeReplayCache(capacityPerEpoch: configuration.handshakeReplayCapacity))
        let trunkDirectory = configuration.insecure ? nil : relayKey.map(TrunkDirectory.init(relayKey:))
        let relaySSRC = UInt32.random(in: 1 ... .max)
        let browserEdge = try configuration.acceptsBrowsers ? Self.makeBrowserEdge() : nil
        self.browserEdge = browserEdge
        let workers = try (0..<configuration.threads).map { index in
            RelayWorker(index: index, loop: try DatagramLoop(name: "relay-loop-\(index)", logger: logger), rooms: core, joins: joins, placement: placement,
                        relaySSRC: relaySSRC, configuration: configuration, metrics: metrics, logger: logger, trunkDirectory: trunkDirectory,
                        browserEdge: browserEdge)
        }
        core.attach(loops: workers)
        self.core = core
        self.joins = joins
        self.trunkDirectory = trunkDirectory
        self.workers = workers
        localAddress = try Self.bind(workers, of: core, to: configuration.listen, bufferBytes: configuration.socketBufferBytes, metrics: metrics, logger: logger)
        logger.info("relay listening", metadata: [
            "udp": "\(Self.describe(localAddress))",
            "threads": "\(configuration.threads)", "max-rooms": "\(configuration.limits.maximumRooms)",
            "max-members-per-room": "\(configuration.limits.maximumMembersPerRoom)",
            "cluster": "\(placement == nil ? "off" : "on")",
        ])
    }

    /// Binds each worker's socket and starts its loop; the first socket picks the port (when
    /// 0 was asked for) and the others join it. On failure every loop is stopped again.
    private static func bind(_ workers: [RelayWorker], of core: RelayCore, to listen: HostAndPort, bufferBytes: Int, metrics: RelayMetrics, logger: Logger) throws -> SocketAddress {
        var address = try listen.socketAddress()
        do {
            for worker in workers {
                let descriptor = try RelaySocket.bound(to: address, bufferBytes: bufferBytes)
                worker.attach(descriptor: descriptor)
                if worker.index == 0 { address = try RelaySocket.localAddress(of: descriptor) }
            }
            reportBufferSizes(workers[0], requested: bufferBytes, metrics: metrics, logger: logger)
            for worker in workers { try worker.start() }
            return address
        } catch {
            for worker in workers { worker.stop() }
            core.detachLoops()
            throw error
        }
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

    /// The metrics in Prometheus's text format: every loop adds its counts and copies its
    /// members' stream figures (a moment's work on each), then the exposition is built on
    /// `loop` (the caller's, an HTTP server's), so a scrape never holds up forwarding while it
    /// formats. Once the relay has stopped, its last counts.
    public func metricsExposition(on loop: any EventLoop) -> EventLoopFuture<[UInt8]> {
        let flushed = loop.makePromise(of: Void.self)
        let gathered = Mutex((remaining: workers.count, streams: [StreamFigures.Sample]()))
        // A stopped loop runs what it is handed on the caller's thread (``DatagramLoop/execute(_:)``).
        for worker in workers {
            worker.loop.execute {
                worker.flushStatistics()
                let streams = worker.streamSamples()
                let last = gathered.withLock { gathered -> Bool in
                    gathered.streams += streams
                    gathered.remaining -= 1
                    return gathered.remaining == 0
                }
                if last { flushed.succeed(()) }
            }
        }
        let (metrics, port) = (self.metrics, localAddress.port)
        return flushed.futureResult.map {
            if let port, let drops = KernelSocketDrops.count(port: port) { metrics.socketReceiveDrops.record(drops) }
            return metrics.exposition(streams: gathered.withLock { $0.streams })
        }
    }

    /// Counts added by every loop, then the exposition; for tests and tools.
    public func metricsText() throws -> String {
        String(decoding: try metricsExposition(on: MultiThreadedEventLoopGroup.singleton.next()).wait(), as: UTF8.self)
    }

    /// Whether the relay runs and takes members (false once shutdown began): `/healthz`.
    public var isRunning: Bool { lifecycle.state.withLock { $0 == .running } }

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
        placement?.stop()
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
        for worker in workers { worker.stop() }
        core.detachLoops()
        logger.notice("relay stopped")
    }
}
