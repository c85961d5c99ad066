import CParleyNet
import Logging
import NIOCore
import ParleySecurity
import ParleyWire

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One event loop's share of the relay: its UDP socket's datagrams, the sessions whose
/// packets that socket receives, and their timers.
///
/// Everything here runs on ``loop``'s thread; nothing in it is locked. The per-packet path —
/// look the source address up, check the SSRC and rate, update reception statistics, write
/// one copy per receiver — reads only this worker's tables and the session's own room
/// snapshot. Membership changes go through ``RelayCore`` (one lock, taken on join and
/// leave) which hands new snapshots to every loop concerned.
final class RelayWorker: @unchecked Sendable {
    let index: Int
    /// The thread everything here runs on.
    let loop: RelayLoop
    unowned let core: RelayCore
    let limits: RelayLimits
    let metrics: RelayMetrics
    let logger: Logger

    // MARK: Loop-confined state

    /// Members whose datagrams arrive on this loop, by source address.
    @exclusivity(unchecked) private var sessions: [PeerAddress: Session] = [:]
    /// The same sessions in ``sweepSliceCount`` groups by id: each tick checks one group's
    /// idle and joining timeouts, so every member is looked at twice a second and no tick
    /// walks them all (at 1,760 members that walk held up forwarding for 0.35 ms).
    private var sweepSlices: [[PeerAddress: Session]] = Array(repeating: [:], count: RelayWorker.sweepSliceCount)
    private var nextSweepSlice = 0
    /// Sessions with a reliable message not yet acknowledged: the tick retransmits for these only.
    private var awaitingAcknowledgement: [PeerAddress: Session] = [:]
    /// Sessions that ended recently, kept a few seconds to retransmit goodbye and to ack a
    /// retransmitted leave (the address was proven, so answering it is safe).
    private var departures: [PeerAddress: Departure] = [:]
    /// What strangers and would-be members may spend: cookie replies, error replies, joins.
    private var budgets: AdmissionBudgets
    /// Lines about refused joins and about members coming and going are limited, or a flood
    /// of either would fill the disk.
    private var refusalLogs: ThrottledLog
    private var membershipLogs: ThrottledLog
    // The hot path's state is touched by this loop's thread only, never re-entrantly, so the
    // runtime's dynamic exclusivity checks (a thread-local access set per access, several
    // percent of the relay's CPU at fan-out 1) are turned off for it.
    @exclusivity(unchecked) private(set) var statistics = WorkerStatistics()
    /// The loop's socket: read through ``receiveBatch``, written through ``sendBatch``; -1
    /// before it is attached and once it is closed.
    @exclusivity(unchecked) private var descriptor: CInt = -1
    /// Datagrams read with one `recvmmsg`.
    private let receiveBatch: DatagramReceiveBatch
    /// Everything written since the last flush: one `sendmmsg` sends it.
    private let sendBatch: DatagramSendBatch
    /// Buffers for opened sealed packets.
    private let allocator = ByteBufferAllocator()
    /// Socket errors are logged at most this often (a firewall rule can refuse thousands of sends a second).
    private var socketErrorLogs: RateLimiter
    /// Read times of packets forwarded since the last flush, for the latency histogram.
    @exclusivity(unchecked) private var forwardedReadTimes: [UInt64] = []
    private var isShuttingDown = false
    private var lastStatisticsFlush: UInt64 = 0

    /// Datagrams per `sendmmsg`: a flush happens when this many are waiting, which also
    /// bounds the delay a long read burst adds.
    static let maximumUnflushedWrites = 256
    static let tickIntervalNanoseconds: UInt64 = 50_000_000
    static let sweepSliceCount = 10
    static let receiverReportIntervalNanoseconds: UInt64 = 1_000_000_000
    static let departureLifetimeNanoseconds: UInt64 = 10_000_000_000
    /// Rosters are paged to fit a datagram that crosses any path unfragmented.
    static let maximumRosterMessageSize = 1200

    struct Departure {
        let sessionID: UInt64
        var goodbye: ReliableSender
        let expiresNanoseconds: UInt64
        let destination: DatagramAddress
        /// The departed member's keys: its goodbye is sealed, and so is its ack.
        let protector: PacketProtector
    }

    init(index: Int, loop: RelayLoop, core: RelayCore) {
        self.index = index
        self.loop = loop
        self.core = core
        self.limits = core.configuration.limits
        self.metrics = core.metrics
        var logger = core.logger
        logger[metadataKey: "loop"] = "\(index)"
        self.logger = logger
        let now = monotonicNanoseconds()
        budgets = AdmissionBudgets(limits: limits, nowNanoseconds: now)
        refusalLogs = ThrottledLog(logger, what: "refused join", perSecond: 5, burst: 20, nowNanoseconds: now)
        membershipLogs = ThrottledLog(logger, what: "membership", perSecond: 20, burst: 100, nowNanoseconds: now)
        socketErrorLogs = RateLimiter(ratePerSecond: 1, burst: 5, nowNanoseconds: now)
        // A datagram longer than max-packet-size arrives cut at its slot, and is dropped.
        receiveBatch = DatagramReceiveBatch(
            capacity: core.configuration.vectorReadCount, slotSize: limits.maximumPacketSize, allocator: allocator)
        // The largest datagram written: a forwarded packet (at most the size limit) or one the
        // relay builds (rosters are paged to 1,200 bytes), sealed.
        sendBatch = DatagramSendBatch(
            messageCapacity: Self.maximumUnflushedWrites,
            largestDatagram: max(limits.maximumPacketSize, 2_048) + SealedHeader.overhead)
        forwardedReadTimes.reserveCapacity(4096)
    }

    // MARK: The socket

    var socketDescriptor: CInt { descriptor }

    /// The socket this worker reads and writes; before its loop starts.
    func attach(descriptor: CInt) {
        self.descriptor = descriptor
    }

    /// Starts the loop's thread on the attached socket.
    func start() throws {
        try loop.start(socket: descriptor, tickNanoseconds: Self.tickIntervalNanoseconds,
                       readable: { self.readSocket() }, tick: { self.tick() })
    }

    /// Stops the loop's thread, then closes the socket (on this thread: the loop has finished).
    func stop() {
        loop.stop()
        loop.submit { self.closeSocket() }
    }

    /// Closes the socket (on the loop, or after it stopped): what was not sent is gone.
    func closeSocket() {
        guard descriptor >= 0 else { return }
        close(descriptor)
        descriptor = -1
        sendBatch.discard()
        forwardedReadTimes.removeAll(keepingCapacity: true)
    }

    /// Read bursts per wake-up before the loop looks at its tasks and timer again.
    static let maximumReadsPerWakeup = 8

    /// The socket has datagrams: read them a batch at a time, handle each, send what that
    /// produced. A short batch means the queue is empty; a full one is followed by another
    /// read without asking epoll first, up to ``maximumReadsPerWakeup``.
    func readSocket() {
        for _ in 0..<Self.maximumReadsPerWakeup {
            guard descriptor >= 0 else { return }
            let count = receiveBatch.receive(on: descriptor)
            if count < 0 {
                if socketErrorLogs.allow(nowNanoseconds: monotonicNanoseconds()) {
                    logger.warning("reading the relay socket failed; the relay carries on", metadata: [
                        "error": "\(String(cString: strerror(Int32(-count))))",
                    ])
                }
                return
            }
            guard count > 0 else { return }
            // One reading of the clock per batch: the datagrams arrived within its span.
            let now = monotonicNanoseconds()
            for index in 0..<count {
                let packet = receiveBatch.packet(index)
                if receiveBatch.isTruncated(index) {
                    // Counted at the slot's size: the kernel does not say how long it was.
                    statistics.received(ReceivedKind(packet.withUnsafeReadableBytes { PacketKind($0) }), bytes: packet.readableBytes)
                    drop(.oversize)
                    continue
                }
                receive(packet, from: receiveBatch.source(index), nowNanoseconds: now)
            }
            flush()
            if count < receiveBatch.capacity { return }
        }
    }

    // MARK: Receiving

    /// One datagram from the socket.
    func receive(_ buffer: ByteBuffer, from address: DatagramAddress, nowNanoseconds now: UInt64) {
        let size = buffer.readableBytes
        let kind = buffer.withUnsafeReadableBytes { PacketKind($0) }
        statistics.received(ReceivedKind(kind), bytes: size)
        guard size <= limits.maximumPacketSize else { return drop(.oversize) }
        guard let peer = PeerAddress(address) else { return drop(.malformed) }

        if core.handshake != nil {
            receiveOnSecureRelay(buffer, kind: kind, from: address, peer: peer, now: now)
            return
        }
        if let session = sessions[peer] {
            switch kind {
            case .rtp: forwardMedia(buffer, from: session, now: now)
            case .rtcp: receiveRTCP(buffer, from: session, now: now)
            case .control: receiveControl(buffer, from: session, receivedSize: size, now: now)
            case .handshake: refuseHandshakeOnInsecureRelay(buffer, from: address, peer: peer, now: now)
            case .sealed, .unknown: drop(.unknownKind)
            }
        } else {
            switch kind {
            case .rtp, .rtcp:
                drop(.notJoined)
                answerStranger(peer, address: address, receivedSize: size, echo: [], now: now)
            case .control: receiveStrangerControl(buffer, from: address, peer: peer, now: now)
            case .handshake: refuseHandshakeOnInsecureRelay(buffer, from: address, peer: peer, now: now)
            case .sealed, .unknown: drop(.unknownKind)
            }
        }
    }

    /// A datagram on a relay that requires encryption: after the handshake, members send only
    /// sealed packets; each is opened once with the member's keys, then handled exactly as a
    /// plaintext packet would be on an insecure relay.
    private func receiveOnSecureRelay(_ buffer: ByteBuffer, kind: PacketKind, from address: DatagramAddress, peer: PeerAddress, now: UInt64) {
        let size = buffer.readableBytes
        switch kind {
        case .handshake:
            receiveHandshake(buffer, from: address, peer: peer, now: now)
        case .sealed:
            if let session = sessions[peer] {
                guard let inner = open(buffer, with: session.protector) else { return }
                switch inner.withUnsafeReadableBytes({ PacketKind($0) }) {
                case .rtp: forwardMedia(inner, from: session, now: now)
                case .rtcp: receiveRTCP(inner, from: session, now: now)
                case .control: receiveControl(inner, from: session, receivedSize: size, now: now)
                case .handshake, .sealed, .unknown: drop(.malformed)
                }
            } else if let departure = departures[peer] {
                guard let inner = open(buffer, with: departure.protector),
                      let message = inner.withUnsafeReadableBytes({ try? ControlMessage(parsing: $0) }) else { return }
                receiveDepartedControl(message, peer: peer, address: address)
            } else {
                drop(.notJoined)
                // The reply echoes the packet's tag, which a client checks against what it sent:
                // a "not joined" forged by someone who never saw its packets cannot end its session.
                let tag = buffer.getBytes(at: buffer.readerIndex + size - SealedHeader.tagSize, length: SealedHeader.tagSize) ?? []
                answerStranger(peer, address: address, receivedSize: size, echo: size >= SealedHeader.overhead ? tag : [], now: now)
            }
        case .control:
            // A plaintext join gets told why (a client run with --insecure); nothing else is answered.
            drop(.plaintextRefused)
            guard let message = buffer.withUnsafeReadableBytes({ try? ControlMessage(parsing: $0) }),
                  case .join = message.body, peer.canBeAnswered, budgets.errorReplies.allow(peer.host, nowNanoseconds: now) else { return }
            sendError(.encryptionRequired, "this relay accepts encrypted clients only: use an invite with a key= and no --insecure",
                      sequence: message.sequence, to: address, limit: size)
        case .rtp, .rtcp:
            drop(.plaintextRefused)
            if sessions[peer] == nil { answerStranger(peer, address: address, receivedSize: size, echo: [], now: now) }
        case .unknown:
            drop(.unknownKind)
        }
    }

    /// Opens a sealed datagram; a failure is counted by its reason and the packet goes no further.
    private func open(_ buffer: ByteBuffer, with protector: PacketProtector) -> ByteBuffer? {
        do {
            return try protector.open(buffer, allocator: allocator)
        } catch {
            switch error {
            case .replayed: drop(.replayed)
            case .malformed: drop(.malformed)
            default: drop(.decryptFailed)
            }
            return nil
        }
    }

    @inline(__always) private func drop(_ reason: DropReason) {
        statistics.dropped(reason)
    }

    // MARK: Media: the hot path

    /// An RTP packet from a member: to every other active member of its room, exactly once,
    /// payload untouched.
    private func forwardMedia(_ buffer: ByteBuffer, from session: Session, now: UInt64) {
        let decision = buffer.withUnsafeReadableBytes { packet in
            Forwarder.admit(packet, from: &session.media, isActive: session.state == .active, nowNanoseconds: now)
        }
        guard decision == .forward else {
            if case let .drop(reason) = decision { drop(reason) }
            return
        }
        session.lastHeardNanoseconds = now
        let copies = writeToOthers(buffer, from: session, kind: .media, now: now)
        if copies > 0 && forwardedReadTimes.count < forwardedReadTimes.capacity {
            forwardedReadTimes.append(now)
        }
        // The stream's receiver report goes out with one of its own packets, so reports are
        // spread as evenly as the packets are: built in a timer tick, a thousand of them
        // held up forwarding for most of a millisecond.
        if now >= session.nextReceiverReportNanoseconds { sendReceiverReport(to: session, now: now) }
    }

    /// Writes `buffer` to every receiver of the session's room but the session, sealed for each
    /// receiver on a secure relay, into the send batch; returns the copies written.
    @inline(__always)
    private func writeToOthers(_ buffer: ByteBuffer, from session: Session, kind: SentKind, now: UInt64) -> Int {
        guard descriptor >= 0 else { return 0 }
        let receivers = session.forwarding.receivers
        return buffer.withUnsafeReadableBytes { packet in
            var copies = 0
            for receiver in receivers where receiver.sessionID != session.id {
                if enqueue(packet, to: receiver.destination, protector: receiver.protector, kind: kind, now: now) { copies += 1 }
            }
            return copies
        }
    }

    /// Seals `packet` for `protector`'s member into the send batch (flushing it first when
    /// full); false if nothing was written.
    @inline(__always)
    private func enqueue(_ packet: UnsafeRawBufferPointer, to destination: DatagramAddress, protector: PacketProtector, kind: SentKind, now: UInt64) -> Bool {
        let size = protector.sealedSize(plaintextCount: packet.count)
        if !sendBatch.hasRoom(for: size) { flush() }
        // After a flush the batch is empty, and it has room for its largest datagram (a packet
        // within max-packet-size, sealed); checked all the same.
        guard sendBatch.hasRoom(for: size) else {
            drop(.oversize)
            return false
        }
        let written = sendBatch.append(to: destination, kind: kind, maximumSize: size) { slot in
            protector.seal(packet, into: slot, nowNanoseconds: now)
        }
        return written > 0
    }

    /// Sends everything written since the last flush (one `sendmmsg` per batch) and records
    /// how long the forwarded packets spent in the relay.
    func flush() {
        // Writes happen only while the socket is open, and closing it discards the batch.
        if !sendBatch.isEmpty {
            let outcome = sendBatch.send(on: descriptor) { kind, bytes in statistics.sent(kind, bytes: bytes) }
            // A full send buffer sheds what is left of the batch; each stream goes on with
            // its next packet, since nothing is left queued behind it.
            if outcome.shed > 0 { statistics.dropped(.sendQueueFull, count: outcome.shed) }
            if outcome.failed > 0 {
                statistics.dropped(.sendFailed, count: outcome.failed)
                if socketErrorLogs.allow(nowNanoseconds: monotonicNanoseconds()) {
                    logger.warning("the kernel refused to send to a member's address; check the firewall's outgoing rules", metadata: [
                        "error": "\(String(cString: strerror(outcome.lastError)))", "refused": "\(outcome.failed)",
                    ])
                }
            }
        }
        if !forwardedReadTimes.isEmpty {
            let end = monotonicNanoseconds()
            for start in forwardedReadTimes {
                metrics.forwardingLatency.recordNanoseconds(Int64(end &- start))
            }
            forwardedReadTimes.removeAll(keepingCapacity: true)
        }
    }

    // MARK: RTCP, terminated per leg

    /// A member's RTCP: its report blocks feed its downstream gauges, and only its own sender
    /// report's figures go on, rebuilt (``RTCPTermination``).
    private func receiveRTCP(_ buffer: ByteBuffer, from session: Session, now: UInt64) {
        guard session.controlRate.allow(nowNanoseconds: now) else { return drop(.rateLimited) }
        guard session.state == .active else { return drop(.notActive) }
        guard let packets = buffer.withUnsafeReadableBytes({ raw in try? RTCPCompoundPacket.parse(raw) }) else { return drop(.malformed) }
        guard let terminated = RTCPTermination(packets, from: session.ssrc) else { return drop(.foreignSSRC) }
        if terminated.nacks > 0 { statistics.dropped(.nackNotServed, count: terminated.nacks) }
        session.lastHeardNanoseconds = now
        if let time = terminated.senderReportTime { session.media.reception?.recordSenderReport(time, arrivalNanoseconds: now) }
        let blocks = terminated.reportBlocks
        if !blocks.isEmpty, let gauges = session.gauges {
            // The worst stream the member hears is what a person there notices.
            gauges.downstreamLoss.record(blocks.map(\.lossFraction).max() ?? 0)
            gauges.downstreamJitter.record(Double(blocks.map(\.jitter).max() ?? 0) / 48_000)
        }
        // What the member loses of each stream it hears goes to that stream's sender, through
        // the relay's next receiver report to it; only about streams of the member's room.
        for block in blocks where block.ssrc != session.ssrc {
            session.forwarding.receivers.first { $0.ssrc == block.ssrc && $0.sessionID != session.id }?
                .listenerLoss.record(listener: session.id, fractionLost: block.fractionLost, now: now)
        }
        // One report a member's send interval is what receivers need (RFC 3550 §6.2); more
        // would be copies to every member on the sender's say-so.
        guard let forward = terminated.forward, session.canPublish, now >= session.nextSenderReportForwardNanoseconds,
              let bytes = try? RTCPCompoundPacket.serialized(forward) else { return }
        session.nextSenderReportForwardNanoseconds = now &+ Self.senderReportForwardIntervalNanoseconds
        var copy = allocator.buffer(capacity: bytes.count)
        copy.writeBytes(bytes)
        _ = writeToOthers(copy, from: session, kind: .rtcp, now: now)
    }

    /// Sender reports forwarded per member at most this often (clients send about one a second).
    static let senderReportForwardIntervalNanoseconds: UInt64 = 400_000_000

    /// A receiver report from the relay's SSRC about the member's stream, about once a second,
    /// so the client can drive its encoder's FEC and bitrate from the loss it sees.
    private func sendReceiverReport(to session: Session, now: UInt64) {
        guard var reception = session.media.reception, reception.isValid else { return }
        var block = reception.makeReportBlock(nowNanoseconds: now)
        session.media.reception = reception
        // Each next report comes 0.5–1.5 intervals later (RFC 3550 §6.3.1's randomisation),
        // so members who joined together do not all fall due in the same tick: a thousand
        // reports built at once stall forwarding for milliseconds.
        session.nextReceiverReportNanoseconds = now &+ UInt64.random(
            in: Self.receiverReportIntervalNanoseconds / 2...Self.receiverReportIntervalNanoseconds * 3 / 2)
        session.gauges?.upstreamLoss.record(block.lossFraction)
        session.gauges?.upstreamJitter.record(reception.jitterSeconds)
        // The fraction lost is the whole path's: the member's leg to us, or what the median
        // listener reports losing, whichever is worse (``ListenerLossBoard``). The
        // cumulative count stays the leg's.
        block.fractionLost = max(block.fractionLost, session.listenerLoss.medianLoss(listeners: session.forwarding.receivers.count - 1, now: now))
        let report = RTCPPacket.receiverReport(RTCPReceiverReport(ssrc: core.relaySSRC, reportBlocks: [block]))
        guard let bytes = try? RTCPCompoundPacket.serialized([report]) else { return }
        send(bytes, to: session, kind: .rtcp)
    }

    // MARK: Control from members

    /// A control message from a member; `receivedSize` is the datagram's size on the wire, what
    /// an answer to it may not exceed.
    private func receiveControl(_ buffer: ByteBuffer, from session: Session, receivedSize size: Int, now: UInt64) {
        let parsed = buffer.withUnsafeReadableBytes { raw -> ControlMessage? in try? ControlMessage(parsing: raw) }
        guard let message = parsed else { return drop(.malformed) }
        if case .join = message.body {
            // On a secure relay joins come inside a handshake, never inside a session.
            guard !session.protector.isSecure else { return drop(.unexpectedControl) }
            // Joins are handled even over the rate: a client retransmits them with backoff.
            return receiveJoin(message, size: size, from: session.address, peer: session.peer, existing: session, now: now)
        }
        guard session.controlRate.allow(nowNanoseconds: now) else { return drop(.rateLimited) }
        switch message.body {
        case let .ready(ready):
            guard ready.cookie == session.cookie else { return drop(.unexpectedControl) }
            session.lastHeardNanoseconds = now
            if session.state == .joining {
                activate(session, now: now)
            } else {
                // The roster is on its way; a ready retransmitted before it arrived needs nothing more.
                resendReliable(session, now: now, force: true)
            }
        case let .ping(ping):
            session.lastHeardNanoseconds = now
            sendControl(.pong(ControlMessage.Pong(timestamp: ping.timestamp)), sequence: message.sequence, to: session, limit: size)
        case let .ack(ack):
            session.lastHeardNanoseconds = now
            session.reliable.acknowledge(sequence: ack.sequence)
        case .leave:
            // An ack is larger than a leave, so an address that never proved itself gets none.
            if session.state == .active {
                sendControl(.ack(ControlMessage.Ack(sequence: message.sequence)), sequence: 0, to: session, limit: nil)
            }
            membershipLogs.log(.info, "member left", metadata: ["member": "\(session.logDescription)"], now: now)
            remove(session, reason: .left, now: now)
        case .pong:
            session.lastHeardNanoseconds = now
        case .join, .joined, .roster, .error, .goodbye:
            drop(.unexpectedControl)
        }
    }

    // MARK: Strangers

    private func receiveStrangerControl(_ buffer: ByteBuffer, from address: DatagramAddress, peer: PeerAddress, now: UInt64) {
        let size = buffer.readableBytes
        let parsed = buffer.withUnsafeReadableBytes { raw -> ControlMessage? in try? ControlMessage(parsing: raw) }
        guard let message = parsed else { return drop(.malformed) }
        switch message.body {
        case .join:
            receiveJoin(message, size: size, from: address, peer: peer, existing: nil, now: now)
        case .leave, .ack:
            guard departures[peer] != nil else { return drop(.notJoined) }
            receiveDepartedControl(message, peer: peer, address: address)
        case .ready, .ping:
            drop(.notJoined)
            answerStranger(peer, address: address, receivedSize: size, echo: [], now: now)
        case .joined, .roster, .pong, .error, .goodbye:
            drop(.notJoined)
        }
    }

    /// A retransmitted leave whose ack was lost, or the ack of a goodbye: the address was
    /// proven before the member left, so answering it is safe.
    private func receiveDepartedControl(_ message: ControlMessage, peer: PeerAddress, address: DatagramAddress) {
        guard let departure = departures[peer] else { return drop(.notJoined) }
        switch message.body {
        case .leave:
            guard let bytes = try? ControlMessage(body: .ack(ControlMessage.Ack(sequence: message.sequence))).serialized() else { return }
            send(bytes, to: address, protector: departure.protector, kind: .control)
        case let .ack(ack):
            departures[peer]!.goodbye.acknowledge(sequence: ack.sequence)
        default:
            drop(.notJoined)
        }
    }

    /// Tells a stranger it is not a member, so a client whose relay restarted rejoins at once;
    /// never with more bytes than it sent, and rate-limited per source and overall. `echo`
    /// (the tag of the sealed packet answered) lets the client know the reply is about its own packet.
    private func answerStranger(_ peer: PeerAddress, address: DatagramAddress, receivedSize: Int, echo: [UInt8], now: UInt64) {
        guard peer.canBeAnswered, budgets.errorReplies.allow(peer.host, nowNanoseconds: now) else { return }
        sendError(.notJoined, "not a member here: join again (the relay may have restarted)", echo: echo, to: address, limit: receivedSize)
    }

    // MARK: Joining

    /// A plaintext join (relays started `--insecure`).
    private func receiveJoin(_ message: ControlMessage, size: Int, from address: DatagramAddress, peer: PeerAddress, existing: Session?, now: UInt64) {
        guard case let .join(join) = message.body else { return }
        // Joins are padded so the answer is never larger than the question; a short one is
        // not from a Parley client and gets no answer at all.
        guard size >= ControlMessage.minimumJoinSize else { return drop(.malformed) }
        guard !isShuttingDown else { return }
        if let existing, existing.ssrc == join.ssrc, existing.room == join.room, existing.token == join.token {
            // A retransmitted join: the same answer, same cookie.
            existing.lastHeardNanoseconds = now
            if existing.joinedMessage.count <= size { send(existing.joinedMessage, to: address, kind: .control) }
            return
        }
        guard budgets.joinAttempts.allow(peer.host, nowNanoseconds: now) else { return drop(.joinRateLimited) }
        let token: AccessToken
        switch verify(join) {
        case let .refused(code, text, logReason):
            metrics.joinRefused(code)
            refuseJoin(code, message: text, logReason: logReason, sequence: message.sequence, peer: peer, address: address, size: size, now: now)
            return
        case let .verified(verified):
            token = verified
        }
        let session = makeSession(join, sequence: message.sequence, token: token, address: address, peer: peer, now: now)
        switch admit(session, replacing: existing, software: join.software, now: now) {
        case let .refused(code, text):
            refuseJoin(code, message: text, logReason: text, sequence: message.sequence, peer: peer, address: address, size: size, now: now)
        case .admitted:
            if session.joinedMessage.count <= size { send(session.joinedMessage, to: address, kind: .control) }
        }
    }

    private enum Verdict {
        case verified(AccessToken)
        case refused(ControlMessage.ErrorCode, String, logReason: String)
    }

    /// The checks every join passes, plaintext or inside a handshake: room name and token.
    private func verify(_ join: ControlMessage.Join) -> Verdict {
        if let problem = ParleyNames.problem(withRoom: join.room) {
            return .refused(.malformedRequest, problem, logReason: "bad room name: \(problem)")
        }
        do {
            return .verified(try AccessToken.verify(join.token, secret: core.secret, room: join.room, now: unixSeconds()))
        } catch {
            return .refused(error.errorCode, error.message, logReason: error.description)
        }
    }

    /// A session for a verified join, with its `joined` answer ready.
    private func makeSession(_ join: ControlMessage.Join, sequence: UInt32, token: AccessToken, address: DatagramAddress, peer: PeerAddress, now: UInt64) -> Session {
        let session = Session(
            id: core.makeSessionID(), address: address, peer: peer, room: join.room, identity: token.identity,
            ssrc: join.ssrc, canPublish: token.canPublish, capabilities: join.capabilities, cookie: UInt64.random(in: 1 ... .max), token: join.token,
            workerIndex: index, limits: limits, nowNanoseconds: now)
        let joined = ControlMessage(sequence: sequence, body: .joined(ControlMessage.Joined(
            cookie: session.cookie, ssrc: session.ssrc, identity: session.identity, room: session.room,
            canPublish: session.canPublish,
            keepaliveIntervalMilliseconds: UInt32(limits.keepaliveIntervalMilliseconds),
            idleTimeoutMilliseconds: UInt32(limits.idleTimeoutMilliseconds))))
        session.joinedMessage = (try? joined.serialized()) ?? []
        return session
    }

    private enum Admission {
        case admitted
        case refused(ControlMessage.ErrorCode, String)
    }

    /// Puts `session` in its room (limits, SSRC, identity), ending `existing` — a session from
    /// the same address — and any session of the same identity elsewhere.
    private func admit(_ session: Session, replacing existing: Session?, software: String, now: UInt64) -> Admission {
        if let existing {
            // The same address joins afresh (a new SSRC, token or handshake): the old session
            // ends quietly, since the client that would hear its goodbye is the one joining.
            remove(existing, reason: .replaced, now: now, tellMember: false)
        }
        switch core.admit(session, now: now) {
        case let .refused(code, text):
            metrics.joinRefused(code)
            return .refused(code, text)
        case let .admitted(replaced):
            sessions[session.peer] = session
            sweepSlices[Self.sweepSlice(of: session)][session.peer] = session
            metrics.joinsAccepted.increment()
            membershipLogs.log(.info, "member joining", metadata: [
                "member": "\(session.logDescription)", "software": "\(software.logSafe())",
                "publish": "\(session.canPublish)", "encrypted": "\(session.protector.isSecure)",
            ], now: now)
            if let replaced {
                membershipLogs.log(.info, "member replaced by a new session", metadata: ["member": "\(replaced.logDescription)"], now: now)
                core.worker(replaced.workerIndex).loop.execute { [worker = core.worker(replaced.workerIndex)] in
                    worker.closeReplaced(replaced)
                }
            }
            return .admitted
        }
    }

    private func refuseJoin(
        _ code: ControlMessage.ErrorCode, message: String, logReason: String, sequence: UInt32,
        peer: PeerAddress, address: DatagramAddress, size: Int, now: UInt64
    ) {
        drop(.notJoined)
        guard peer.canBeAnswered, budgets.errorReplies.allow(peer.host, nowNanoseconds: now) else { return }
        refusalLogs.log(.notice, "join refused", metadata: ["from": "\(peer)", "reason": "\(logReason.logSafe(limit: 200))"], now: now)
        sendError(code, message, sequence: sequence, to: address, limit: size)
    }

    // MARK: The encrypted handshake

    /// Hello and handshake init. Answers only what checks out, never with more bytes than came
    /// in. An init's cookie is checked first (an HMAC, no state, no budget), then its source's
    /// and the loop's join budget is spent, then the Diffie-Hellman; its handshake is recorded
    /// against replays only once the join inside has verified (``receiveSecureJoin``).
    private func receiveHandshake(_ buffer: ByteBuffer, from address: DatagramAddress, peer: PeerAddress, now: UInt64) {
        guard let handshake = core.handshake else { return }
        let size = buffer.readableBytes
        guard peer.canBeAnswered else { return drop(.malformed) }
        let unixTime = UInt64(unixSeconds())
        switch buffer.getInteger(at: buffer.readerIndex, as: UInt8.self).flatMap(SecureMessageType.init(rawValue:)) {
        case .hello:
            guard budgets.cookieReplies.allow(peer.host, nowNanoseconds: now) else { return drop(.helloRateLimited) }
            let reply = buffer.withUnsafeReadableBytes {
                handshake.cookieReply(toHello: $0, address: peer.cookieBytes, unixSeconds: unixTime)
            }
            guard let reply, reply.count <= size else { return drop(.malformed) }
            send(reply, to: address, kind: .control)
        case .handshakeInit:
            guard !isShuttingDown else { return }
            let existing = sessions[peer]
            enum Outcome { case opened(AcceptedHandshake), overBudget, refused(SecurityError) }
            let outcome: Outcome = buffer.withUnsafeReadableBytes { raw in
                do throws(SecurityError) {
                    let message = try handshake.checkCookie(raw, address: peer.cookieBytes, unixSeconds: unixTime)
                    guard budgets.joinAttempts.allow(peer.host, nowNanoseconds: now) else { return .overBudget }
                    return .opened(try handshake.open(message))
                } catch {
                    return .refused(error)
                }
            }
            switch outcome {
            case let .opened(accepted) where core.replayCache.contains(accepted.ephemeralKey, unixSeconds: unixTime):
                // A retransmitted init (its response was lost) gets the same response again; a
                // replay of one whose session is gone gets nothing.
                if let existing, let made = existing.handshake, made.ephemeralKey == accepted.ephemeralKey, made.response.count <= size {
                    send(made.response, to: address, kind: .control)
                } else {
                    drop(.handshakeReplayed)
                }
            case let .opened(accepted):
                receiveSecureJoin(accepted, size: size, from: address, peer: peer, existing: existing, now: now)
            case .overBudget:
                drop(.joinRateLimited)
            case .refused(.invalidCookie):
                drop(.cookieInvalid)
            case .refused:
                drop(.handshakeFailed)
            }
        default:
            drop(.unexpectedControl)
        }
    }

    /// The join inside an accepted handshake: the same checks as a plaintext join; the answer
    /// (joined, or the refusal) goes back inside the handshake response, so it is authenticated.
    private func receiveSecureJoin(_ accepted: AcceptedHandshake, size: Int, from address: DatagramAddress, peer: PeerAddress, existing: Session?, now: UInt64) {
        guard let message = try? ControlMessage(parsing: accepted.payload), case let .join(join) = message.body else {
            return drop(.malformed)
        }
        // Refusals answer with a copy of the accepted handshake, so one can be made whatever happens.
        let refusalHandshake = accepted
        func refuse(_ code: ControlMessage.ErrorCode, _ text: String, logReason: String) {
            drop(.notJoined)
            guard budgets.errorReplies.allow(peer.host, nowNanoseconds: now) else { return }
            refusalLogs.log(.notice, "join refused", metadata: ["from": "\(peer)", "reason": "\(logReason.logSafe(limit: 200))"], now: now)
            var handshake = refusalHandshake
            let error = ControlMessage(sequence: message.sequence, body: .error(ControlMessage.ErrorReply(code: code, message: String(text.prefix(200)))))
            guard let payload = try? error.serialized(),
                  let (response, _) = try? handshake.respond(relayIndex: 0, payload: payload, nowNanoseconds: now),
                  response.count <= size else { return }
            send(response, to: address, kind: .control)
        }

        let token: AccessToken
        switch verify(join) {
        case let .refused(code, text, logReason):
            metrics.joinRefused(code)
            return refuse(code, text, logReason: logReason)
        case let .verified(verified):
            token = verified
        }
        // Only a verified join is remembered, so strangers cannot fill the cache, and each
        // source only its share of it.
        switch core.replayCache.insert(accepted.ephemeralKey, source: peer.host.bytes, unixSeconds: UInt64(unixSeconds())) {
        case .accepted:
            break
        case .replayed:
            return drop(.handshakeReplayed)
        case .sourceOverQuota:
            metrics.joinRefused(.rateLimited)
            return refuse(.rateLimited, "too many joins from your network in the last minutes; try again in a minute",
                          logReason: "handshake replay cache share of \(peer.host) spent")
        }
        let session = makeSession(join, sequence: message.sequence, token: token, address: address, peer: peer, now: now)
        var handshake = accepted
        guard let (response, secureSession) = try? handshake.respond(
            relayIndex: UInt32.random(in: 1 ... .max), payload: session.joinedMessage, nowNanoseconds: now),
              response.count <= size else {
            return drop(.handshakeFailed)
        }
        session.secure(with: PacketProtector(session: secureSession), ephemeralKey: accepted.ephemeralKey, response: response)
        switch admit(session, replacing: existing, software: join.software, now: now) {
        case let .refused(code, text):
            refuse(code, text, logReason: text)
        case .admitted:
            send(response, to: address, kind: .control)
        }
    }

    /// A hello on a relay started `--insecure`: say so, in no more bytes than the hello, echoing
    /// its nonce so the client can tell this answer is about its own hello.
    private func refuseHandshakeOnInsecureRelay(_ buffer: ByteBuffer, from address: DatagramAddress, peer: PeerAddress, now: UInt64) {
        drop(.unknownKind)
        guard let hello = buffer.withUnsafeReadableBytes({ try? HandshakeHello(parsing: $0) }),
              peer.canBeAnswered, budgets.errorReplies.allow(peer.host, nowNanoseconds: now) else { return }
        sendError(.encryptionUnavailable, "this relay runs without encryption (--insecure)", echo: hello.nonceBytes, to: address, limit: buffer.readableBytes)
    }

    /// The member proved its address: it gets the roster and media, the others a new roster.
    private func activate(_ session: Session, now: UInt64) {
        guard core.activate(session, now: now) else { return }
        session.state = .active
        session.gauges = metrics.makeStreamGauges(room: session.room, identity: session.identity)
        membershipLogs.log(.info, "member active", metadata: ["member": "\(session.logDescription)"], now: now)
    }

    // MARK: Room updates (from any loop, through execute)

    /// A new roster and forwarding snapshot for `session`'s room.
    /// `roster` is empty when only the forwarding changes now and the roster follows later
    /// (``RosterSchedule``); each is taken only if newer than what the session has.
    func applyRoomUpdate(_ session: Session, snapshot: RoomSnapshot, roster: [ControlMessage.Roster]) {
        guard session.state != .closed else { return }
        if session.forwarding === RoomSnapshot.empty || RoomSnapshot.isNewer(snapshot.version, than: session.forwarding.version) {
            session.forwarding = snapshot
        }
        guard let version = roster.first?.version, session.rosterVersion.map({ RoomSnapshot.isNewer(version, than: $0) }) ?? true else { return }
        session.rosterVersion = version
        let now = monotonicNanoseconds()
        for page in roster {
            let sequence = session.takeSequence()
            let message = ControlMessage(sequence: sequence, isReliable: true, body: .roster(page))
            guard let bytes = try? message.serialized() else { continue }
            session.reliable.enqueue(sequence: sequence, kind: .roster(version: page.version), bytes: bytes, nowNanoseconds: now)
            awaitingAcknowledgement[session.peer] = session
            send(bytes, to: session, kind: .control)
        }
        flush()
    }

    /// Another loop admitted a new session with this one's identity.
    func closeReplaced(_ session: Session) {
        guard session.state != .closed else { return }
        finishClosing(session, reason: .replaced, now: monotonicNanoseconds(), tellMember: true)
        flush()
    }

    // MARK: Leaving

    /// Takes the member out of its room and this loop, and tells the others.
    private func remove(_ session: Session, reason: RemovalReason, now: UInt64, tellMember: Bool = true) {
        core.remove(session, now: now)
        finishClosing(session, reason: reason, now: now, tellMember: tellMember)
    }

    private func finishClosing(_ session: Session, reason: RemovalReason, now: UInt64, tellMember: Bool) {
        session.state = .closed
        session.gauges?.destroy()
        session.gauges = nil
        if sessions[session.peer] === session { sessions[session.peer] = nil }
        let slice = Self.sweepSlice(of: session)
        if sweepSlices[slice][session.peer] === session { sweepSlices[slice][session.peer] = nil }
        if awaitingAcknowledgement[session.peer] === session { awaitingAcknowledgement[session.peer] = nil }
        metrics.removals[reason]?.increment()
        var goodbye = ReliableSender()
        if tellMember, let goodbyeReason = reason.goodbye {
            let sequence = session.takeSequence()
            let message = ControlMessage(sequence: sequence, isReliable: true, body: .goodbye(ControlMessage.Goodbye(reason: goodbyeReason, message: reason.goodbyeText)))
            if let bytes = try? message.serialized() {
                // Idle members are told once, best-effort: they are probably gone.
                goodbye.enqueue(sequence: sequence, kind: .goodbye, bytes: bytes, nowNanoseconds: now, attempts: reason == .idleTimeout ? 1 : ReliableSender.maximumAttempts)
                send(bytes, to: session, kind: .control)
            }
        }
        if reason != .neverReady, sessions[session.peer] == nil {
            departures[session.peer] = Departure(
                sessionID: session.id, goodbye: goodbye, expiresNanoseconds: now + Self.departureLifetimeNanoseconds,
                destination: session.address, protector: session.protector)
        }
    }

    // MARK: Timers

    /// Every ``tickIntervalNanoseconds``: retransmissions, one slice of the idle and joining
    /// timeouts (and the receiver reports of streams that went quiet), departures, and the
    /// counters for /metrics. (Receiver reports go out with the stream's own packets, in
    /// `forwardMedia`.) The tick holds up forwarding while it runs, so it touches only what
    /// is due.
    func tick() {
        let now = monotonicNanoseconds()
        let idle = UInt64(limits.idleTimeoutMilliseconds) * 1_000_000
        let pending = UInt64(limits.pendingTimeoutMilliseconds) * 1_000_000
        var acknowledged: [PeerAddress] = []
        for (peer, session) in awaitingAcknowledgement {
            resendReliable(session, now: now, force: false)
            if session.reliable.isEmpty { acknowledged.append(peer) }
        }
        for peer in acknowledged { awaitingAcknowledgement[peer] = nil }
        var expired: [(Session, RemovalReason)] = []
        for session in sweepSlices[nextSweepSlice].values {
            if session.state == .joining, now &- session.joinedNanoseconds > pending {
                expired.append((session, .neverReady))
            } else if now &- session.lastHeardNanoseconds > idle {
                expired.append((session, .idleTimeout))
            } else if session.state == .active, now >= session.nextReceiverReportNanoseconds {
                // A stream that stopped still gets its last report; a talking one gets it
                // with its next packet, so few are ever sent from here.
                sendReceiverReport(to: session, now: now)
            }
        }
        nextSweepSlice = (nextSweepSlice + 1) % Self.sweepSliceCount
        for (session, reason) in expired {
            membershipLogs.log(.info, reason == .neverReady ? "joining member never sent ready; removed" : "member idle; removed", metadata: [
                "member": "\(session.logDescription)",
            ], now: now)
            remove(session, reason: reason, now: now, tellMember: reason == .idleTimeout)
        }
        core.publishDueRosters(now: now)
        membershipLogs.flushSummary(now: now)
        refusalLogs.flushSummary(now: now)
        for (peer, departure) in departures {
            if now >= departure.expiresNanoseconds {
                departures[peer] = nil
                continue
            }
            var goodbye = departure.goodbye
            for bytes in goodbye.due(nowNanoseconds: now) { send(bytes, to: departure.destination, protector: departure.protector, kind: .control) }
            departures[peer]!.goodbye = goodbye
        }
        if now &- lastStatisticsFlush >= 500_000_000 { flushStatistics(now: now) }
        flush()
    }

    private static func sweepSlice(of session: Session) -> Int { Int(session.id % UInt64(sweepSliceCount)) }

    private func resendReliable(_ session: Session, now: UInt64, force: Bool) {
        if force {
            for message in session.reliable.outstanding { send(message.bytes, to: session, kind: .control) }
        } else {
            for bytes in session.reliable.due(nowNanoseconds: now) { send(bytes, to: session, kind: .control) }
        }
    }

    /// Adds this loop's counts to the metrics (before a scrape, and twice a second).
    func flushStatistics(now: UInt64 = monotonicNanoseconds()) {
        statistics.flush(into: metrics)
        lastStatisticsFlush = now
    }

    // MARK: Shutdown

    /// Every member here is told the relay is going away, reliably, until it acks or the
    /// grace period ends.
    func beginShutdown() {
        isShuttingDown = true
        let now = monotonicNanoseconds()
        for session in Array(sessions.values) {
            remove(session, reason: .shutdown, now: now, tellMember: session.state == .active)
        }
        flush()
    }

    /// Goodbyes still unacknowledged.
    var unacknowledgedGoodbyes: Int {
        departures.values.reduce(0) { $0 + ($1.goodbye.isEmpty ? 0 : 1) }
    }

    // MARK: Sending control

    /// To a stranger: plaintext, and never more than `limit` bytes.
    private func sendControl(_ body: ControlMessage.Body, sequence: UInt32, to address: DatagramAddress, limit: Int?) {
        guard let bytes = try? ControlMessage(sequence: sequence, body: body).serialized() else { return }
        if let limit, bytes.count > limit { return }
        send(bytes, to: address, kind: .control)
    }

    /// To a member: sealed with its keys on a secure relay (the seal adds the same overhead
    /// the member's own packet carried, so the limit compares plaintexts).
    private func sendControl(_ body: ControlMessage.Body, sequence: UInt32, to session: Session, limit: Int?) {
        guard let bytes = try? ControlMessage(sequence: sequence, body: body).serialized() else { return }
        let overhead = session.protector.isSecure ? SealedHeader.overhead : 0
        if let limit, bytes.count + overhead > limit { return }
        send(bytes, to: session, kind: .control)
    }

    /// An error reply cut to `limit` bytes: the echo always fits or nothing is sent; the
    /// message text is shortened (at a character boundary) or dropped.
    private func sendError(_ code: ControlMessage.ErrorCode, _ text: String, sequence: UInt32 = 0, echo: [UInt8] = [],
                           to address: DatagramAddress, limit: Int) {
        let room = limit - ControlMessage.headerSize - 3 - (echo.isEmpty ? 0 : 1 + echo.count)
        guard room >= 0 else { return }
        var fitted = ""
        for character in text.prefix(255) {
            guard fitted.utf8.count + character.utf8.count <= min(room, 255) else { break }
            fitted.append(character)
        }
        sendControl(.error(ControlMessage.ErrorReply(code: code, message: fitted, echo: echo)), sequence: sequence, to: address, limit: limit)
    }

    /// Plaintext bytes to an address: replies to strangers, and everything on an insecure relay.
    private func send(_ bytes: [UInt8], to address: DatagramAddress, kind: SentKind) {
        send(bytes, to: address, protector: .plaintext, kind: kind)
    }

    /// Bytes for a member, sealed with its keys on a secure relay.
    private func send(_ bytes: [UInt8], to session: Session, kind: SentKind) {
        send(bytes, to: session.address, protector: session.protector, kind: kind)
    }

    private func send(_ bytes: [UInt8], to destination: DatagramAddress, protector: PacketProtector, kind: SentKind) {
        guard descriptor >= 0, !bytes.isEmpty else { return }
        let now = monotonicNanoseconds()
        _ = bytes.withUnsafeBytes { enqueue($0, to: destination, protector: protector, kind: kind, now: now) }
    }

    // MARK: Introspection for the relay and its tests

    var sessionCount: Int { sessions.count }

    func hasSession(at peer: PeerAddress) -> Bool { sessions[peer] != nil }
}
