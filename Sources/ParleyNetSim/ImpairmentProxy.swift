import Logging
import NIOCore
import NIOPosix

/// A bidirectional UDP proxy between clients and a relay that impairs each client's
/// packets, both ways, with the models of ``ImpairmentPipeline``.
///
/// ```
///  client A ──▶ listen socket ──▶ [A's up pipeline]   ──▶ A's own socket ──▶ relay
///  client A ◀── listen socket ◀── [A's down pipeline] ◀── A's own socket ◀── relay
/// ```
///
/// Each client address is a *flow* with its own socket towards the relay, so the relay
/// sees every client at a distinct address and its replies find their way back, and with
/// its own seeded model state for each direction (seeds derived from the base seed, the
/// flow's number and the direction), so flows are impaired independently and a run is
/// reproduced by its seed. Only datagrams from the relay's address are sent back to a
/// client; anything else reaching a flow's socket is dropped and counted.
///
/// Packets are timed on the event loop: a packet due now is written at once (the path a
/// clean proxy takes), a delayed one waits in a ``DeliveryQueue`` under one timer armed for
/// the earliest deadline (a `timerfd`, precise to microseconds). Flows idle for
/// `idleTimeout` are closed. All state lives on one event loop; this object is a handle.
public final class ImpairmentProxy: Sendable {
    public struct Configuration: Sendable {
        /// Where clients send.
        public var listen: SocketAddress
        /// Where the relay is.
        public var relay: SocketAddress
        /// Client to relay.
        public var up: Impairment
        /// Relay to client.
        public var down: Impairment
        public var seed: UInt64
        /// A flow with no packet either way for this long is closed.
        public var idleTimeout: Duration = .seconds(120)
        /// More clients than this are refused (each flow holds a socket).
        public var maximumFlows = 1024

        public init(listen: SocketAddress, relay: SocketAddress, up: Impairment = .none, down: Impairment = .none, seed: UInt64 = 1) {
            self.listen = listen
            self.relay = relay
            self.up = up
            self.down = down
            self.seed = seed
        }
    }

    /// The address clients send to (with the port the system chose, if `listen` had port 0).
    public let localAddress: SocketAddress
    public let eventLoop: any EventLoop
    private let core: NIOLoopBound<ProxyCore>
    /// Completes when the proxy has stopped (by ``stop()`` or because its socket failed).
    public let closeFuture: EventLoopFuture<Void>

    private init(localAddress: SocketAddress, core: NIOLoopBound<ProxyCore>, closeFuture: EventLoopFuture<Void>, eventLoop: any EventLoop) {
        self.localAddress = localAddress
        self.core = core
        self.closeFuture = closeFuture
        self.eventLoop = eventLoop
    }

    /// Binds the listening socket and starts forwarding. Fails with an ``ImpairmentError``
    /// if an impairment is invalid, or the socket's error if it cannot be bound.
    public static func start(
        _ configuration: Configuration, on eventLoop: any EventLoop,
        logger: Logger = Logger(label: "parley.netsim")
    ) -> EventLoopFuture<ImpairmentProxy> {
        do {
            try configuration.up.validate()
            try configuration.down.validate()
        } catch {
            return eventLoop.makeFailedFuture(error)
        }
        precondition(configuration.maximumFlows >= 1, "a proxy needs room for at least one flow")
        precondition(configuration.idleTimeout > .zero, "the idle timeout must be positive")
        return eventLoop.flatSubmit {
            let core = NIOLoopBound(ProxyCore(configuration: configuration, eventLoop: eventLoop, logger: logger), eventLoop: eventLoop)
            return DatagramBootstrap(group: eventLoop)
                .channelOption(.socketOption(.so_rcvbuf), value: ProxyCore.socketBufferBytes)
                .channelOption(.socketOption(.so_sndbuf), value: ProxyCore.socketBufferBytes)
                // recvmmsg: up to 16 datagrams per system call, each in its own 4 KiB slice.
                .channelOption(.datagramVectorReadMessageCount, value: ProxyCore.vectorReadCount)
                .channelOption(
                    .recvAllocator,
                    value: FixedSizeRecvByteBufferAllocator(capacity: ProxyCore.vectorReadCount * ProxyCore.datagramCapacity))
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(ClientSideHandler(core: core.value))
                    }
                }
                .bind(to: configuration.listen)
                .map { channel in
                    core.value.started(listener: channel)
                    return ImpairmentProxy(
                        localAddress: channel.localAddress!, core: core, closeFuture: channel.closeFuture, eventLoop: eventLoop)
                }
        }
    }

    /// What the proxy has done so far.
    public func report() -> EventLoopFuture<ProxyReport> {
        let core = self.core
        return eventLoop.submit { core.value.report() }
    }

    /// Stops forwarding, closes every socket, and returns the final report. Packets still
    /// waiting for their delivery time are dropped (and counted in the report).
    public func stop() -> EventLoopFuture<ProxyReport> {
        let core = self.core
        return eventLoop.flatSubmit { core.value.stop() }
    }
}
