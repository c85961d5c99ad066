import Logging
import ParleyBasics
import ParleyDatagrams
import ParleyWire

/// One event loop's share of the relay, in the shape of a SwiftNIO channel pipeline: the loop's
/// socket (``RelayChannel``), and handlers that each own their table and their kind of work.
///
/// ```
///            ┌─ a member's address, what its transport carries ─▶ LegHandler ─▶ MemberTable (its control)
///            │  (a browser member's SRTP and SRTCP among them)
///  datagram ─┤─ sealed, a trunk's address and receiver index ──▶ LegHandler ─▶ TrunkTable  (its control)
///            ├─ STUN or DTLS (RFC 7983's ranges) ──────────────▶ BrowserTable (ICE-lite, DTLS-SRTP)
///            └─ anything else: strangers, joins, handshakes ───▶ MemberAdmission (─▶ TrunkTable's handshakes)
/// ```
///
/// The worker only reads, classifies each datagram once (``InboundDatagram``), finds the leg it
/// belongs to, and hands it on; everything a leg does with what arrives over it — forwarding,
/// RTCP, reliable control, room updates — is ``LegHandler``'s, the same for members and trunks.
///
/// Everything here runs on ``loop``'s thread; nothing in it is locked. The per-packet path
/// reads only this loop's tables and the leg's own room snapshot. Membership changes go
/// through ``RoomMembership`` (one lock, taken when legs come and go), which hands the news
/// to every loop concerned through ``LegLoop``.
final class RelayWorker: @unchecked Sendable {
    let context: LoopContext
    let legs: LegHandler
    let members: MemberTable
    let admission: MemberAdmission
    /// Nil on an `--insecure` relay, which has no key to prove to another relay.
    let trunks: TrunkTable?
    /// Nil on a relay that takes no browsers (its web port is off). `--insecure` does not turn
    /// them off: a browser's media is DTLS-SRTP whatever the relay asks of `parley` members.
    let browsers: BrowserTable?

    var index: Int { context.index }
    var loop: DatagramLoop { context.loop }

    static let tickIntervalNanoseconds: UInt64 = 50_000_000
    /// Read bursts per wake-up before the loop looks at its tasks and timer again.
    static let maximumReadsPerWakeup = 8

    init(index: Int, loop: DatagramLoop, rooms: any RoomMembership, joins: JoinVerifier, placement: (any RoomPlacement)? = nil, relaySSRC: UInt32,
         configuration: RelayConfiguration, metrics: RelayMetrics, logger: Logger, trunkDirectory: TrunkDirectory? = nil,
         browserEdge: BrowserEdge? = nil) {
        let context = LoopContext(index: index, loop: loop, rooms: rooms, relaySSRC: relaySSRC, configuration: configuration, metrics: metrics,
                                  logger: logger)
        let legs = LegHandler(context: context)
        let members = MemberTable(context: context, legs: legs)
        let trunks = trunkDirectory.map { TrunkTable(context: context, legs: legs, directory: $0, joins: joins) }
        self.context = context
        self.legs = legs
        self.members = members
        self.trunks = trunks
        let browsers = browserEdge.map { BrowserTable(context: context, legs: legs, members: members, edge: $0) }
        self.browsers = browsers
        admission = MemberAdmission(context: context, legs: legs, members: members, trunks: trunks, joins: joins, placement: placement)
        legs.attach(members: members, trunks: trunks)
        members.attach(admission: admission)
        browsers?.attach(admission: admission)
    }

    // MARK: The socket

    var socketDescriptor: CInt { context.channel.descriptor }

    /// The socket this worker reads and writes; before its loop starts.
    func attach(descriptor: CInt) {
        context.channel.attach(descriptor: descriptor)
    }

    /// Starts the loop's thread on the attached socket.
    func start() throws {
        try loop.start(socket: context.channel.descriptor, tickNanoseconds: Self.tickIntervalNanoseconds,
                       readable: { self.readSocket() }, tick: { self.tick() })
    }

    /// Stops the loop's thread, then closes the socket (on this thread: the loop has finished).
    func stop() {
        loop.stop()
        loop.submit { self.context.channel.close() }
    }

    /// The socket has datagrams: read them a batch at a time, hand each on, send what that
    /// produced. A short batch means the queue is empty; a full one is followed by another
    /// read without asking epoll first, up to ``maximumReadsPerWakeup``.
    func readSocket() {
        let channel = context.channel
        let batch = channel.receiveBatch
        for _ in 0..<Self.maximumReadsPerWakeup {
            let count = channel.read()
            guard count > 0 else { return }
            // One reading of the clock per batch: the datagrams arrived within its span.
            let now = MonotonicClock.now()
            for index in 0..<count {
                let bytes = batch.bytes(index)
                if batch.isTruncated(index) {
                    // Counted at the slot's size: the kernel does not say how long it was.
                    channel.received(PacketKind(UnsafeRawBufferPointer(bytes)), bytes: bytes.count)
                    channel.drop(.oversize)
                    continue
                }
                let source = batch.source(index)
                guard let peer = PeerAddress(source) else {
                    channel.received(PacketKind(UnsafeRawBufferPointer(bytes)), bytes: bytes.count)
                    channel.drop(.malformed)
                    continue
                }
                var datagram = InboundDatagram(bytes: bytes, source: source, peer: peer)
                receive(&datagram, now: now)
            }
            channel.flush()
            if count < batch.capacity { return }
        }
    }

    /// Where one datagram goes: to the leg it belongs to, or to admission.
    @inline(__always)
    func receive(_ datagram: inout InboundDatagram, now: UInt64) {
        context.channel.received(datagram.kind, bytes: datagram.wireSize)
        if let member = members.member(at: datagram.peer), member.transport.carries(datagram.kind) {
            return legs.receive(&datagram, over: member, now: now)
        }
        if datagram.kind == .sealed, let trunks, let trunk = trunks.trunk(for: datagram) {
            return legs.receive(&datagram, over: trunk, now: now)
        }
        if datagram.kind == .stun || datagram.kind == .dtls, let browsers {
            return browsers.receive(&datagram, now: now)
        }
        admission.receive(&datagram, now: now)
    }

    // MARK: The tick

    /// Every ``tickIntervalNanoseconds``: what each handler has due. The tick holds up
    /// forwarding while it runs, so each touches only what is due.
    func tick() {
        let now = MonotonicClock.now()
        legs.tick(now: now)
        members.tick(now: now)
        context.rooms.publishDueRosters(now: now)
        trunks?.tick(now: now)
        browsers?.tick(now: now)
        context.membershipLogs.flushSummary(now: now)
        context.refusalLogs.flushSummary(now: now)
        context.channel.flushStatisticsIfDue(now: now)
        context.channel.flush()
    }

    // MARK: Shutdown

    /// Every member here is told the relay is going away, reliably, until it acks or the
    /// grace period ends; every trunk is told too.
    func beginShutdown() {
        context.isShuttingDown = true
        let now = MonotonicClock.now()
        members.removeAll(reason: .shutdown, now: now)
        trunks?.endAll(reason: .shuttingDown, now: now)
        context.channel.flush()
    }

    /// Goodbyes still unacknowledged.
    var unacknowledgedGoodbyes: Int { members.unacknowledgedGoodbyes }

    /// Adds this loop's counts to the metrics (before a scrape).
    func flushStatistics() {
        context.channel.flushStatistics()
    }

    /// This loop's members' stream figures (for a scrape).
    func streamSamples() -> [StreamFigures.Sample] { members.streamSamples() }

    // MARK: Introspection for the relay and its tests

    var sessionCount: Int { members.count }

    func hasSession(at peer: PeerAddress) -> Bool { members.member(at: peer) != nil }
}

/// News from the rooms: ``RelayCore`` hands it over from whichever thread changed the room,
/// and it is applied on the leg's own loop, so the forwarding path never reads a list another
/// thread is writing.
extension RelayWorker: LegLoop {
    func deliver(_ update: RoomUpdate, to leg: Leg) {
        loop.execute { self.legs.apply(update, to: leg, now: MonotonicClock.now()) }
    }

    func deliverText(_ text: String, from sender: String, to leg: Leg) {
        loop.execute { self.legs.queueText(text, from: sender, to: leg, now: MonotonicClock.now()) }
    }

    func deliverMediaKeys(_ entries: [ControlMessage.MediaKeys.Entry], from sender: UInt32, to leg: Leg) {
        loop.execute { self.legs.queueMediaKeys(entries, from: sender, to: leg, now: MonotonicClock.now()) }
    }

    func deliverModeration(_ request: ControlMessage.ModerationRequest, to trunk: TrunkLeg) {
        loop.execute { self.trunks?.passOn(request, to: trunk, now: MonotonicClock.now()) }
    }

    func deliverEnding(_ ending: LegEnding, to leg: Leg) {
        loop.execute {
            let now = MonotonicClock.now()
            switch (ending, leg) {
            case let (.removed(reason, message), member as MemberLeg):
                self.members.closeRemoved(member, reason: reason, message: message, now: now)
            case let (.trunkEnded(reason), trunk as TrunkLeg):
                self.trunks?.end(trunk, reason: reason, now: now)
            case let (.trunkClosing, trunk as TrunkLeg):
                self.trunks?.closeWhenSettled(trunk)
            default:
                break
            }
            self.context.channel.flush()
        }
    }
}

/// What a loop's handlers share, as SwiftNIO's handlers share their channel's context: the
/// socket, the rooms, the limits and the logs. Used on the loop's thread only.
final class LoopContext: @unchecked Sendable {
    let index: Int
    /// The thread everything here runs on.
    let loop: DatagramLoop
    let channel: RelayChannel
    let rooms: any RoomMembership
    /// The SSRC of the relay's own receiver reports.
    let relaySSRC: UInt32
    let limits: RelayLimits
    let metrics: RelayMetrics
    let logger: Logger
    /// What strangers and would-be legs may spend: cookie replies, error replies, joins, trunk inits.
    var budgets: AdmissionBudgets
    /// Lines about refused joins and about members coming and going are limited, or a flood
    /// of either would fill the disk.
    var refusalLogs: ThrottledLog
    var membershipLogs: ThrottledLog
    var isShuttingDown = false

    init(index: Int, loop: DatagramLoop, rooms: any RoomMembership, relaySSRC: UInt32, configuration: RelayConfiguration, metrics: RelayMetrics,
         logger: Logger) {
        self.index = index
        self.loop = loop
        self.rooms = rooms
        self.relaySSRC = relaySSRC
        limits = configuration.limits
        self.metrics = metrics
        var logger = logger
        logger[metadataKey: "loop"] = "\(index)"
        self.logger = logger
        channel = RelayChannel(configuration: configuration, metrics: metrics, logger: logger)
        let now = MonotonicClock.now()
        budgets = AdmissionBudgets(limits: limits, nowNanoseconds: now)
        refusalLogs = ThrottledLog(logger, what: "refused join", perSecond: 5, burst: 20, nowNanoseconds: now)
        membershipLogs = ThrottledLog(logger, what: "membership", perSecond: 20, burst: 100, nowNanoseconds: now)
    }

    @inline(__always) func drop(_ reason: DropReason, count: Int = 1) {
        channel.drop(reason, count: count)
    }
}
