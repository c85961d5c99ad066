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
/// snapshot. Membership changes go through ``RoomMembership`` (one lock, taken on join and
/// leave), which hands new snapshots to every loop concerned through ``SessionLoop``.
///
/// This file holds the socket, the dispatch of each datagram and the forwarding path; the
/// worker's other concerns are facets in files of their own, each driving a plain type:
/// `RelayWorker+Control.swift` (members' control messages and strangers, ``ControlReply``),
/// `RelayWorker+Joining.swift` (plaintext joins and the Noise handshake, ``JoinVerifier``),
/// `RelayWorker+Leaving.swift` (departures and shutdown, ``Departures``),
/// `RelayWorker+Timers.swift` (the tick), `RelayWorker+Sending.swift` (what the relay builds
/// and sends itself), `RelayWorker+Room.swift` (members' muted/deafened state and text
/// messages), `RelayWorker+RTCP.swift` (RTCP, terminated per leg by ``MemberRTCP``),
/// `RelayWorker+RoomUpdates.swift` (new snapshots and rosters from the rooms, applied here),
/// `RelayWorker+Moderation.swift` (a moderator's requests), `RelayWorker+Placement.swift`
/// (where a join goes in a cluster), `RelayWorker+Trunks.swift` and
/// `RelayWorker+TrunkHandshake.swift` (trunks to other relays: what crosses them, and how
/// they open).
final class RelayWorker: @unchecked Sendable {
    let index: Int
    /// The thread everything here runs on.
    let loop: RelayLoop
    let rooms: any RoomMembership
    let joins: JoinVerifier
    /// The SSRC of the relay's own receiver reports.
    let relaySSRC: UInt32
    let limits: RelayLimits
    let metrics: RelayMetrics
    let logger: Logger
    /// Trunks to other relays: trusted keys and openings, shared by the loops (nil on an
    /// `--insecure` relay, which has no key to prove).
    let trunkDirectory: TrunkDirectory?
    /// Browser members' offers and DTLS certificate, shared by the loops (nil: the relay takes
    /// no browsers, its web port is off).
    let browsers: BrowserEdge?

    // MARK: Loop-confined state

    // The hot path's state is touched by this loop's thread only, never re-entrantly, so the
    // runtime's dynamic exclusivity checks (a thread-local access set per access) are turned
    // off for it.

    /// Members whose datagrams arrive on this loop, by source address.
    @exclusivity(unchecked) var sessions: [PeerAddress: Session] = [:]
    /// Trunks whose peer's datagrams arrive on this loop (`RelayWorker+Trunks.swift`).
    @exclusivity(unchecked) var trunks: [TrunkRoute: Trunk] = [:]
    /// The same sessions in ``sweepSliceCount`` groups by id: each tick checks one group's
    /// idle and joining timeouts, so every member is looked at twice a second and no tick
    /// holds up forwarding by walking them all.
    var sweepSlices: [[PeerAddress: Session]] = Array(repeating: [:], count: RelayWorker.sweepSliceCount)
    var nextSweepSlice = 0
    /// Sessions with a reliable message not yet acknowledged: the tick retransmits for these only.
    var awaitingAcknowledgement: [PeerAddress: Session] = [:]
    /// Sessions whose latest muted/deafened state waits for their rate (``MemberStatePacer``).
    var heldBackStates: [PeerAddress: Session] = [:]
    /// Members with sealed media keys waiting to go out, gathered until the next tick (or a
    /// full message), so a rotation reaches each member in a few messages, not one per sender.
    var pendingMediaKeys: [PeerAddress: Session] = [:]
    /// Browser members whose DTLS handshake runs: the tick retransmits their flights.
    var handshakingBrowsers: [PeerAddress: Session] = [:]
    var departures = Departures()
    /// What strangers and would-be members may spend: cookie replies, error replies, joins.
    var budgets: AdmissionBudgets
    /// Lines about refused joins and about members coming and going are limited, or a flood
    /// of either would fill the disk.
    var refusalLogs: ThrottledLog
    var membershipLogs: ThrottledLog
    @exclusivity(unchecked) private(set) var statistics = WorkerStatistics()
    /// The loop's socket: read through ``receiveBatch``, written through ``sendBatch``; -1
    /// before it is attached and once it is closed.
    @exclusivity(unchecked) private var descriptor: CInt = -1
    /// Datagrams read with one `recvmmsg`.
    private let receiveBatch: DatagramReceiveBatch
    /// Everything written since the last flush: one `sendmmsg` sends it.
    private let sendBatch: DatagramSendBatch
    /// Buffers for opened sealed packets and forwarded RTCP.
    let allocator = ByteBufferAllocator()
    /// Socket errors are logged at most this often (a firewall rule can refuse thousands of sends a second).
    private var socketErrorLogs: TokenBucket
    /// Read times of packets forwarded since the last flush, for the latency histogram.
    @exclusivity(unchecked) var forwardedReadTimes: [UInt64] = []
    var isShuttingDown = false
    var lastStatisticsFlush: UInt64 = 0

    /// Datagrams per `sendmmsg`: a flush happens when this many are waiting, which also
    /// bounds the delay a long read burst adds.
    static let maximumUnflushedWrites = 256
    static let tickIntervalNanoseconds: UInt64 = 50_000_000
    static let sweepSliceCount = 10
    /// Read bursts per wake-up before the loop looks at its tasks and timer again.
    static let maximumReadsPerWakeup = 8

    init(index: Int, loop: RelayLoop, rooms: any RoomMembership, joins: JoinVerifier, relaySSRC: UInt32,
         configuration: RelayConfiguration, metrics: RelayMetrics, logger: Logger, trunkDirectory: TrunkDirectory? = nil,
         browsers: BrowserEdge? = nil) {
        self.index = index
        self.browsers = browsers
        self.trunkDirectory = trunkDirectory
        self.loop = loop
        self.rooms = rooms
        self.joins = joins
        self.relaySSRC = relaySSRC
        self.limits = configuration.limits
        self.metrics = metrics
        var logger = logger
        logger[metadataKey: "loop"] = "\(index)"
        self.logger = logger
        let now = monotonicNanoseconds()
        budgets = AdmissionBudgets(limits: limits, nowNanoseconds: now)
        refusalLogs = ThrottledLog(logger, what: "refused join", perSecond: 5, burst: 20, nowNanoseconds: now)
        membershipLogs = ThrottledLog(logger, what: "membership", perSecond: 20, burst: 100, nowNanoseconds: now)
        socketErrorLogs = TokenBucket(ratePerSecond: 1, burst: 5, nowNanoseconds: now)
        // A datagram longer than max-packet-size arrives cut at its slot, and is dropped.
        receiveBatch = DatagramReceiveBatch(
            capacity: configuration.vectorReadCount, slotSize: limits.maximumPacketSize, allocator: allocator)
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
                    statistics.received(packet.withUnsafeReadableBytes { PacketKind($0) }, bytes: packet.readableBytes)
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
        statistics.received(kind, bytes: size)
        guard size <= limits.maximumPacketSize else { return drop(.oversize) }
        guard let peer = PeerAddress(address) else { return drop(.malformed) }

        if joins.handshake != nil {
            receiveOnSecureRelay(buffer, kind: kind, from: address, peer: peer, now: now)
            return
        }
        if let session = sessions[peer] {
            switch kind {
            case .rtp where session.browser == nil: forwardMedia(buffer, from: session, now: now)
            case .rtcp where session.browser == nil: receiveRTCP(buffer, from: session, now: now)
            case .control where session.browser == nil: receiveControl(buffer, from: session, receivedSize: size, now: now)
            case .handshake: refuseHandshakeOnInsecureRelay(buffer, from: address, peer: peer, now: now)
            case .rtp, .rtcp, .control, .stun, .dtls: receiveBrowserDatagram(buffer, kind: kind, from: address, peer: peer, session: session, now: now)
            case .sealed, .unknown: drop(.unknownKind)
            }
        } else {
            switch kind {
            case .rtp, .rtcp:
                drop(.notJoined)
                answerStranger(peer, address: address, receivedSize: size, echo: [], now: now)
            case .control: receiveStrangerControl(buffer, from: address, peer: peer, now: now)
            case .handshake: refuseHandshakeOnInsecureRelay(buffer, from: address, peer: peer, now: now)
            case .stun, .dtls: receiveBrowserDatagram(buffer, kind: kind, from: address, peer: peer, session: nil, now: now)
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
                case .handshake, .sealed, .stun, .dtls, .unknown: drop(.malformed)
                }
            } else if !trunks.isEmpty, let trunk = trunk(for: buffer, from: peer) {
                receiveFromTrunk(buffer, trunk: trunk, now: now)
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
            // SRTP from a browser member looks like plaintext RTP; it is told by its source.
            if let session = sessions[peer], session.browser != nil {
                return receiveBrowserDatagram(buffer, kind: kind, from: address, peer: peer, session: session, now: now)
            }
            drop(.plaintextRefused)
            if sessions[peer] == nil { answerStranger(peer, address: address, receivedSize: size, echo: [], now: now) }
        case .stun, .dtls:
            receiveBrowserDatagram(buffer, kind: kind, from: address, peer: peer, session: sessions[peer], now: now)
        case .unknown:
            drop(.unknownKind)
        }
    }

    /// Opens a sealed datagram; a failure is counted by its reason and the packet goes no further.
    func open(_ buffer: ByteBuffer, with protector: PacketProtector) -> ByteBuffer? {
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

    @inline(__always) func drop(_ reason: DropReason, count: Int = 1) {
        statistics.dropped(reason, count: count)
    }

    // MARK: Media: the hot path

    /// An RTP packet from a member: to every other active member of its room, exactly once,
    /// payload untouched.
    func forwardMedia(_ buffer: ByteBuffer, from session: Session, now: UInt64) {
        let decision = buffer.withUnsafeReadableBytes { packet in
            MediaAdmission.admit(packet, from: &session.media, isActive: session.state == .active, nowNanoseconds: now)
        }
        guard decision == .forward else {
            if case let .drop(reason) = decision {
                drop(reason)
                // A server-muted member is still there, talking: not idle.
                if reason == .serverMuted { session.lastHeardNanoseconds = now }
            }
            return
        }
        session.lastHeardNanoseconds = now
        let copies = writeToOthers(buffer, from: session, kind: .media, now: now)
        if copies > 0 && forwardedReadTimes.count < forwardedReadTimes.capacity {
            forwardedReadTimes.append(now)
        }
        // The stream's receiver report goes out with one of its own packets, so reports are
        // spread as evenly as the packets are; built all at once in a timer tick, they would
        // hold up forwarding.
        if now >= session.nextReceiverReportNanoseconds { sendReceiverReport(to: session, now: now) }
    }

    /// Writes `buffer` to every receiver of the session's room but the session, sealed for each
    /// receiver on a secure relay, into the send batch; returns the copies written.
    @inline(__always)
    func writeToOthers(_ buffer: ByteBuffer, from session: Session, kind: SentKind, now: UInt64) -> Int {
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
    func enqueue(_ packet: UnsafeRawBufferPointer, to destination: DatagramAddress, protector: PacketProtector, kind: SentKind, now: UInt64) -> Bool {
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
            if outcome.shed > 0 { drop(.sendQueueFull, count: outcome.shed) }
            if outcome.failed > 0 {
                drop(.sendFailed, count: outcome.failed)
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

    /// Seals `bytes` for `protector`'s member into the send batch: what the relay builds
    /// itself (`RelayWorker+Sending.swift`), sent with the forwarded media.
    func send(_ bytes: [UInt8], to destination: DatagramAddress, protector: PacketProtector, kind: SentKind) {
        guard descriptor >= 0, !bytes.isEmpty else { return }
        let now = monotonicNanoseconds()
        _ = bytes.withUnsafeBytes { enqueue($0, to: destination, protector: protector, kind: kind, now: now) }
    }

    /// Adds this loop's counts to the metrics (before a scrape, and twice a second).
    func flushStatistics(now: UInt64 = monotonicNanoseconds()) {
        statistics.flush(into: metrics)
        lastStatisticsFlush = now
    }

    // MARK: Introspection for the relay and its tests

    var sessionCount: Int { sessions.count }

    func hasSession(at peer: PeerAddress) -> Bool { sessions[peer] != nil }
}
