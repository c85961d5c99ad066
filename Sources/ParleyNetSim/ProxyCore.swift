import Logging
import NIOCore
import NIOPosix

/// The proxy's state and decisions; used only on its event loop.
final class ProxyCore {
    /// The largest datagram forwarded is one byte less: a datagram that fills the buffer
    /// may have been cut short by the socket, so it is dropped rather than forwarded
    /// damaged. No Parley packet comes near.
    static let datagramCapacity = 4096
    static let vectorReadCount = 16
    /// Room for a few seconds of packets, so a stalled machine delays them rather than
    /// losing them (the kernel caps it at net.core.rmem_max / wmem_max).
    static let socketBufferBytes: SocketOptionValue = 4 << 20
    /// Client packets held for a flow whose socket is still being bound.
    static let waitingLimit = 256
    /// A datagram due within this much of now is sent now: one timer wake-up less, and
    /// nobody can tell 20 µs.
    static let earlySlack: Int64 = 20_000

    struct PendingDatagram {
        let flow: ProxyFlow
        let toRelay: Bool
        let payload: ByteBuffer
    }

    let configuration: ImpairmentProxy.Configuration
    let eventLoop: any EventLoop
    let logger: Logger
    private let startedAt = NIODeadline.now()
    private var listener: (any Channel)?
    private var flows: [SocketAddress: ProxyFlow] = [:]
    private var flowsOpened = 0
    private var flowsExpired = 0
    private var closedUp = ImpairmentReport()
    private var closedDown = ImpairmentReport()
    private var refusedPackets = 0
    private var oversizedPackets = 0
    private var strayPackets = 0
    private var failedSends = 0
    private var lastRefusalLog: NIODeadline?
    private var queue = DeliveryQueue<PendingDatagram>()
    private var timer: NIOScheduledCallback?
    private var timerDeadline = Int64.max
    private var channelsToFlush: [ObjectIdentifier: any Channel] = [:]
    private var expiry: RepeatedTask?
    private var isStopped = false
    private let allocator = ByteBufferAllocator()

    init(configuration: ImpairmentProxy.Configuration, eventLoop: any EventLoop, logger: Logger) {
        self.configuration = configuration
        self.eventLoop = eventLoop
        self.logger = logger
    }

    func started(listener: any Channel) {
        self.listener = listener
        let interval = min(configuration.idleTimeout / 4, .seconds(5))
        let bound = NIOLoopBound(self, eventLoop: eventLoop)
        expiry = eventLoop.scheduleRepeatedTask(
            initialDelay: .nanoseconds(interval.nanoseconds), delay: .nanoseconds(interval.nanoseconds)
        ) { _ in
            bound.value.closeIdleFlows(now: .now())
        }
    }

    // MARK: Packets in

    func fromClient(_ envelope: AddressedEnvelope<ByteBuffer>, at now: NIODeadline) {
        guard !isStopped else { return }
        deliverDue(by: Int64(now.uptimeNanoseconds) + Self.earlySlack)
        guard envelope.data.readableBytes < Self.datagramCapacity else {
            oversizedPackets += 1
            return
        }
        guard let flow = flows[envelope.remoteAddress] ?? openFlow(for: envelope.remoteAddress, now: now) else {
            refusedPackets += 1
            return
        }
        impair(envelope.data, of: flow, toRelay: true, receivedAt: now)
    }

    func fromRelay(_ envelope: AddressedEnvelope<ByteBuffer>, to flow: ProxyFlow, at now: NIODeadline) {
        guard !isStopped, !flow.isClosed else { return }
        guard envelope.remoteAddress == configuration.relay else {
            strayPackets += 1
            return
        }
        deliverDue(by: Int64(now.uptimeNanoseconds) + Self.earlySlack)
        guard envelope.data.readableBytes < Self.datagramCapacity else {
            oversizedPackets += 1
            return
        }
        impair(envelope.data, of: flow, toRelay: false, receivedAt: now)
    }

    /// Runs a datagram through its flow's pipeline for its direction and dispatches each copy.
    private func impair(_ payload: ByteBuffer, of flow: ProxyFlow, toRelay: Bool, receivedAt now: NIODeadline) {
        flow.lastActivity = now
        let time = Int64(now.uptimeNanoseconds)
        let deliveries = toRelay
            ? flow.upPipeline.process(sentAtNanoseconds: time, size: payload.readableBytes)
            : flow.downPipeline.process(sentAtNanoseconds: time, size: payload.readableBytes)
        for copy in deliveries.indices {
            dispatch(payload, of: flow, toRelay: toRelay, at: deliveries.nanoseconds(at: copy), now: time)
        }
    }

    // MARK: Timing

    /// Sends now what is due now; queues the rest under the timer.
    private func dispatch(_ payload: ByteBuffer, of flow: ProxyFlow, toRelay: Bool, at deadline: Int64, now: Int64) {
        if deadline <= now + Self.earlySlack {
            send(payload, of: flow, toRelay: toRelay)
            return
        }
        // The received buffer is a slice of a 64 KiB read buffer; a compact copy lets the
        // socket reuse that buffer while this datagram waits.
        var copy = allocator.buffer(capacity: payload.readableBytes)
        copy.writeImmutableBuffer(payload)
        queue.insert(PendingDatagram(flow: flow, toRelay: toRelay, payload: copy), at: deadline)
        armTimer(for: deadline)
    }

    private func armTimer(for deadline: Int64) {
        guard deadline < timerDeadline else { return }
        timer?.cancel()
        timerDeadline = deadline
        timer = try? eventLoop.assumeIsolated().scheduleCallback(
            at: NIODeadline.uptimeNanoseconds(UInt64(max(0, deadline))), handler: DeliveryTimer(core: self))
    }

    func timerFired() {
        timer = nil
        timerDeadline = .max
        deliverDue(by: Int64(NIODeadline.now().uptimeNanoseconds) + Self.earlySlack)
        flushPending()
        if let next = queue.nextDeadline { armTimer(for: next) }
    }

    private func deliverDue(by time: Int64) {
        while let due = queue.popDue(by: time) {
            send(due.payload, of: due.flow, toRelay: due.toRelay)
        }
    }

    // MARK: Packets out

    private func send(_ payload: ByteBuffer, of flow: ProxyFlow, toRelay: Bool) {
        let channel: any Channel
        let destination: SocketAddress
        if toRelay {
            guard let upstream = flow.upstream else {
                if !flow.isClosed && flow.waitingForSocket.count < Self.waitingLimit {
                    flow.waitingForSocket.append(payload)
                } else {
                    failedSends += 1
                }
                return
            }
            (channel, destination) = (upstream, configuration.relay)
        } else {
            guard let listener else { return }
            (channel, destination) = (listener, flow.client)
        }
        guard channel.isActive, channel.isWritable else {
            failedSends += 1
            return
        }
        // Written now, flushed once per batch of reads or deliveries, so that several
        // datagrams leave in one sendmmsg.
        channel.write(AddressedEnvelope(remoteAddress: destination, data: payload), promise: nil)
        channelsToFlush[ObjectIdentifier(channel)] = channel
    }

    func flushPending() {
        guard !channelsToFlush.isEmpty else { return }
        for channel in channelsToFlush.values { channel.flush() }
        channelsToFlush.removeAll(keepingCapacity: true)
    }

    // MARK: Flows

    private func openFlow(for client: SocketAddress, now: NIODeadline) -> ProxyFlow? {
        guard flows.count < configuration.maximumFlows else {
            if lastRefusalLog.map({ now - $0 > .seconds(10) }) ?? true {
                lastRefusalLog = now
                logger.warning(
                    "refusing packets from \(Format.address(client)): the proxy already has \(flows.count) flows; raise --max-flows or wait for idle flows to close")
            }
            return nil
        }
        flowsOpened += 1
        let flow = ProxyFlow(
            index: flowsOpened, client: client, up: configuration.up, down: configuration.down,
            seed: configuration.seed, now: now)
        flows[client] = flow
        let bound = NIOLoopBound((core: self, flow: flow), eventLoop: eventLoop)
        let wildcard = configuration.relay.protocol == .inet6 ? "::" : "0.0.0.0"
        DatagramBootstrap(group: eventLoop)
            .channelOption(.socketOption(.so_rcvbuf), value: Self.socketBufferBytes)
            .channelOption(.socketOption(.so_sndbuf), value: Self.socketBufferBytes)
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: Self.datagramCapacity))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(RelaySideHandler(core: bound.value.core, flow: bound.value.flow))
                }
            }
            .bind(host: wildcard, port: 0)
            .assumeIsolated()
            .whenComplete { result in
                let (core, flow) = bound.value
                switch result {
                case .success(let channel):
                    core.upstreamBound(channel, for: flow)
                case .failure(let error):
                    core.logger.error("flow \(flow.index) from \(Format.address(flow.client)): cannot open a socket towards the relay (\(error)); its packets are dropped")
                    core.failedSends += flow.waitingForSocket.count
                    flow.waitingForSocket.removeAll()
                    core.close(flow, reason: "its socket could not be opened")
                }
            }
        return flow
    }

    private func upstreamBound(_ channel: any Channel, for flow: ProxyFlow) {
        guard !flow.isClosed, !isStopped else {
            channel.close(promise: nil)
            return
        }
        flow.upstream = channel
        logger.info("flow \(flow.index) from \(Format.address(flow.client)) opened; the relay sees it coming from port \(channel.localAddress?.port ?? 0)")
        let waiting = flow.waitingForSocket
        flow.waitingForSocket.removeAll()
        for payload in waiting { send(payload, of: flow, toRelay: true) }
        flushPending()
    }

    func upstreamClosed(_ flow: ProxyFlow) {
        guard !flow.isClosed, !isStopped else { return }
        logger.warning("flow \(flow.index) from \(Format.address(flow.client)): its socket towards the relay closed; the next packet opens a new flow")
        close(flow, reason: "its socket closed")
    }

    func closeIdleFlows(now: NIODeadline) {
        let limit = TimeAmount.nanoseconds(configuration.idleTimeout.nanoseconds)
        for flow in flows.values where now - flow.lastActivity >= limit {
            flowsExpired += 1
            close(flow, reason: "idle for \(Format.duration(configuration.idleTimeout))")
        }
    }

    private func close(_ flow: ProxyFlow, reason: String) {
        guard !flow.isClosed else { return }
        flow.isClosed = true
        if flows[flow.client] === flow { flows[flow.client] = nil }
        closedUp.merge(flow.upPipeline.report)
        closedDown.merge(flow.downPipeline.report)
        flow.upstream?.close(promise: nil)
        logger.info("flow \(flow.index) from \(Format.address(flow.client)) closed, \(reason): up \(flow.upPipeline.report.summary); down \(flow.downPipeline.report.summary)")
    }

    func socketError(_ error: any Error, side: String) {
        logger.debug("\(side) socket: \(error)")
    }

    // MARK: Reports and stopping

    func report() -> ProxyReport {
        var report = ProxyReport()
        report.openFlows = flows.values.sorted { $0.index < $1.index }.map(\.report)
        report.up = closedUp
        report.down = closedDown
        for flow in report.openFlows {
            report.up.merge(flow.up)
            report.down.merge(flow.down)
        }
        report.flowsOpened = flowsOpened
        report.flowsExpired = flowsExpired
        report.refusedPackets = refusedPackets
        report.oversizedPackets = oversizedPackets
        report.strayPackets = strayPackets
        report.failedSends = failedSends
        report.uptime = .nanoseconds(Int64((NIODeadline.now() - startedAt).nanoseconds))
        return report
    }

    func stop() -> EventLoopFuture<ProxyReport> {
        guard !isStopped else { return eventLoop.makeSucceededFuture(report()) }
        flushPending()
        var report = self.report()
        isStopped = true
        report.undeliveredAtStop = queue.count + flows.values.reduce(0) { $0 + $1.waitingForSocket.count }
        queue.removeAll()
        timer?.cancel()
        timer = nil
        expiry?.cancel()
        expiry = nil
        var closing: [EventLoopFuture<Void>] = []
        for flow in flows.values {
            flow.isClosed = true
            if let upstream = flow.upstream { closing.append(upstream.close()) }
        }
        flows.removeAll()
        if let listener { closing.append(listener.close()) }
        listener = nil
        let finalReport = report
        return EventLoopFuture.whenAllComplete(closing, on: eventLoop).map { _ in finalReport }
    }

    func listenerClosed() {
        guard !isStopped else { return }
        logger.error("the listening socket closed; the proxy stops")
        _ = stop()
    }
}

/// Fires when the earliest delayed datagram is due.
private struct DeliveryTimer: NIOScheduledCallbackHandler {
    let core: ProxyCore

    func handleScheduledCallback(eventLoop: some EventLoop) {
        core.timerFired()
    }
}

/// Reads what clients send to the proxy.
final class ClientSideHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let core: ProxyCore

    init(core: ProxyCore) { self.core = core }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        core.fromClient(unwrapInboundIn(data), at: .now())
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        core.flushPending()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        core.socketError(error, side: "listening")
    }

    func channelInactive(context: ChannelHandlerContext) {
        core.listenerClosed()
    }
}

/// Reads what the relay sends to one flow's socket.
final class RelaySideHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let core: ProxyCore
    let flow: ProxyFlow

    init(core: ProxyCore, flow: ProxyFlow) {
        self.core = core
        self.flow = flow
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        core.fromRelay(unwrapInboundIn(data), to: flow, at: .now())
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        core.flushPending()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        core.socketError(error, side: "flow \(flow.index)'s relay-side")
    }

    func channelInactive(context: ChannelHandlerContext) {
        core.upstreamClosed(flow)
    }
}
