import Logging
import NIOCore
import NIOPosix
import ParleySecurity
import Synchronization

/// A running relay: its event loops, one UDP socket per loop on the same port, the admin
/// HTTP server, and graceful shutdown.
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
    private let group: MultiThreadedEventLoopGroup
    private let channels: Mutex<[Channel]>
    private let tickTasks: Mutex<[RepeatedTask]>
    private let admin: AdminServer?
    private let lifecycle = Lifecycle()
    private let logger: Logger

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
        let group = MultiThreadedEventLoopGroup(numberOfThreads: configuration.threads)
        do {
            return try Relay(configuration: configuration, secret: secret, relayKey: relayKey, logger: logger, metrics: metrics, group: group)
        } catch {
            try? group.syncShutdownGracefully()
            throw error
        }
    }

    private init(configuration: RelayConfiguration, secret: TokenSecret, relayKey: RelayKey?, logger: Logger, metrics: RelayMetrics, group: MultiThreadedEventLoopGroup) throws {
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
        self.group = group
        let core = RelayCore(configuration: configuration, secret: secret, relayKey: relayKey, metrics: metrics, logger: logger)
        if configuration.insecure {
            logger.warning("running WITHOUT encryption (--insecure): anyone on the path can listen to calls and read tokens; use this on trusted networks and for tests only")
        } else if let relayKey {
            logger.info("encrypted transport on; relay public key \(relayKey.publicKeyText)")
        }
        self.core = core
        let loops = Array(group.makeIterator())
        let workers = loops.enumerated().map { RelayWorker(index: $0.offset, eventLoop: $0.element, core: core) }
        core.setWorkers(workers)

        // The first socket picks the port (when 0 was asked for); the others join it.
        var bound: [Channel] = []
        var address = try configuration.listen.socketAddress()
        for worker in workers {
            let channel = try Self.bind(worker: worker, address: address, configuration: configuration)
            if bound.isEmpty, let local = channel.localAddress { address = local }
            bound.append(channel)
        }
        localAddress = address
        channels = Mutex(bound)
        Self.reportBufferSizes(bound[0], requested: configuration.socketBufferBytes, metrics: metrics, logger: logger)

        tickTasks = Mutex(workers.map { worker in
            worker.eventLoop.scheduleRepeatedTask(initialDelay: .milliseconds(50), delay: .nanoseconds(Int64(RelayWorker.tickIntervalNanoseconds))) { _ in
                worker.tick()
            }
        })

        if let adminAddress = configuration.admin {
            let lifecycle = self.lifecycle
            admin = try AdminServer.start(
                address: try adminAddress.socketAddress(), group: group,
                metrics: { [core, address] in Self.scrape(core: core, port: address.port, on: loops[0]) },
                healthy: { lifecycle.state.withLock { $0 == .running } },
                logger: logger)
            self.adminAddress = admin?.localAddress
        } else {
            admin = nil
            self.adminAddress = nil
        }
        for (index, channel) in bound.enumerated() { watch(channel, worker: workers[index]) }
        logger.info("relay listening", metadata: [
            "udp": "\(Self.describe(localAddress))", "admin": "\(adminAddress.map(Self.describe) ?? "off")",
            "threads": "\(configuration.threads)", "max-rooms": "\(configuration.limits.maximumRooms)",
            "max-members-per-room": "\(configuration.limits.maximumMembersPerRoom)",
        ])
    }

    private static func bind(worker: RelayWorker, address: SocketAddress, configuration: RelayConfiguration) throws -> Channel {
        try openSocket(worker: worker, address: address, configuration: configuration).wait()
    }

    /// Opens the loop's socket (shared port, buffers) and hands it to SwiftNIO for reading;
    /// the worker writes to it directly (see ``DatagramSendBatch``).
    private static func openSocket(worker: RelayWorker, address: SocketAddress, configuration: RelayConfiguration) -> EventLoopFuture<Channel> {
        let descriptor: CInt
        do {
            descriptor = try RelaySocket.bound(to: address, bufferBytes: configuration.socketBufferBytes)
        } catch {
            return worker.eventLoop.makeFailedFuture(error)
        }
        return bootstrap(worker: worker, descriptor: descriptor, configuration: configuration).withBoundSocket(descriptor)
    }

    private static func bootstrap(worker: RelayWorker, descriptor: CInt, configuration: RelayConfiguration) -> DatagramBootstrap {
        DatagramBootstrap(group: worker.eventLoop)
            // recvmmsg: up to this many datagrams per system call.
            .channelOption(.datagramVectorReadMessageCount, value: configuration.vectorReadCount)
            // One recvmmsg per wake-up: a short batch means the queue is empty, and asking
            // again only to hear EAGAIN cost a system call per wake-up (at fan-out 1, half
            // load, the relay's core went from 84–87 % to 79–81 % without it); with more
            // waiting, epoll (level-triggered) reports the socket again at once.
            .channelOption(.maxMessagesPerRead, value: 1)
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: configuration.vectorReadCount * 2048))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(RelayChannelHandler(worker: worker, descriptor: descriptor))
                }
            }
    }

    private static func reportBufferSizes(_ channel: Channel, requested: Int, metrics: RelayMetrics, logger: Logger) {
        // Linux reports twice what it grants for the payload (the rest is its bookkeeping),
        // and caps the request at net.core.rmem_max / wmem_max.
        let receive = Int((try? channel.getOption(.socketOption(.so_rcvbuf)).wait()) ?? 0) / 2
        let send = Int((try? channel.getOption(.socketOption(.so_sndbuf)).wait()) ?? 0) / 2
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

    /// A socket that closes while the relay runs (a fatal send error, say) is bound again,
    /// so one bad moment never stops forwarding for good.
    private func watch(_ channel: Channel, worker: RelayWorker) {
        channel.closeFuture.whenComplete { [self] _ in
            guard lifecycle.state.withLock({ $0 == .running }) else { return }
            logger.error("a relay socket closed unexpectedly; binding it again", metadata: ["loop": "\(worker.index)"])
            // Asynchronously: this runs on the loop itself, which must never block on a future.
            worker.eventLoop.scheduleTask(in: .milliseconds(100)) {
                Self.openSocket(worker: worker, address: self.localAddress, configuration: self.configuration).whenComplete { result in
                    switch result {
                    case let .success(replacement):
                        self.channels.withLock { $0[worker.index] = replacement }
                        self.logger.notice("relay socket bound again", metadata: ["loop": "\(worker.index)"])
                        self.watch(replacement, worker: worker)
                    case let .failure(error):
                        self.logger.critical("cannot bind the relay socket again; restart the relay", metadata: ["error": "\(error)"])
                    }
                }
            }
        }
    }

    /// "127.0.0.1:7800" or "[::1]:7800", for people.
    static func describe(_ address: SocketAddress) -> String {
        let host = address.ipAddress ?? "?"
        let port = address.port.map(String.init) ?? "?"
        return host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    private static func scrape(core: RelayCore, port: Int?, on loop: EventLoop) -> EventLoopFuture<[UInt8]> {
        let flushes = core.allWorkers.map { worker in worker.eventLoop.submit { worker.flushStatistics() } }
        return EventLoopFuture.andAllComplete(flushes, on: loop).map {
            if let port, let drops = KernelSocketDrops.count(port: port) { core.metrics.socketReceiveDrops.record(drops) }
            return core.metrics.exposition()
        }
    }

    /// Counts added by every loop, then the exposition; for tests and tools.
    public func metricsText() throws -> String {
        String(decoding: try Self.scrape(core: core, port: localAddress.port, on: group.next()).wait(), as: UTF8.self)
    }

    /// Closes one loop's socket as a fatal send error would; for the test that the relay binds it again.
    func closeSocketAsIfItFailed(loop index: Int) {
        let channel = channels.withLock { $0[index] }
        try? channel.close().wait()
    }

    /// The event loop whose socket holds the session of a client at `address`, if any.
    public func loopIndex(of address: SocketAddress) -> Int? {
        guard let peer = PeerAddress(address) else { return nil }
        for worker in core.allWorkers {
            if (try? worker.eventLoop.submit { worker.hasSession(at: peer) }.wait()) == true { return worker.index }
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
        let workers = core.allWorkers
        let started = monotonicNanoseconds()
        core.beginShutdown()
        for worker in workers { worker.eventLoop.execute { worker.beginShutdown() } }
        // Retransmissions run on the loops' ticks; wait for acks or the grace period.
        let grace = UInt64(configuration.shutdownGraceMilliseconds) * 1_000_000
        while monotonicNanoseconds() - started < grace {
            let waiting = workers.map { worker in worker.eventLoop.submit { worker.unacknowledgedGoodbyes } }
            let outstanding = waiting.reduce(0) { $0 + ((try? $1.wait()) ?? 0) }
            if outstanding == 0 && monotonicNanoseconds() - started > 100_000_000 { break }
            usleepNanoseconds(50_000_000)
        }
        for task in tickTasks.withLock({ $0 }) { task.cancel() }
        for worker in workers { try? worker.eventLoop.submit { worker.flushStatistics() }.wait() }
        lifecycle.state.withLock { $0 = .stopped }
        for channel in channels.withLock({ $0 }) { try? channel.close().wait() }
        admin?.close()
        try? group.syncShutdownGracefully()
        logger.notice("relay stopped")
    }
}

private func usleepNanoseconds(_ nanoseconds: UInt64) {
    var request = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 { request = remaining }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
