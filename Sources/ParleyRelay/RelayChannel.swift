import Logging
import ParleyBasics
import ParleyDatagrams
import ParleyWire

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One loop's socket, in the shape of a SwiftNIO channel: what is read arrives in its read
/// batch, what any handler writes goes into its send batch (sealed for its receiver on the
/// way in) and leaves with one `sendmmsg` at the next flush, and what it drops it counts.
/// The worker's handlers share it, as NIO's handlers share their channel through its context.
///
/// Nothing here allocates per datagram: datagrams are read into preallocated slots and opened
/// there, copies are sealed straight into a preallocated arena, and reports the relay builds
/// itself on the forwarding path are written into ``scratch``. Used on one loop's thread only.
final class RelayChannel {
    let metrics: RelayMetrics
    private let logger: Logger

    /// The socket; -1 before it is attached and once it is closed.
    private(set) var descriptor: CInt = -1
    /// Datagrams read with one `recvmmsg`.
    let receiveBatch: DatagramReceiveBatch
    /// Everything written since the last flush: one `sendmmsg` sends it.
    private let sendBatch: DatagramSendBatch
    /// The loop's counts since its last flush into the metrics.
    @exclusivity(unchecked) private(set) var statistics = WorkerStatistics()
    /// Socket errors are logged at most this often (a firewall rule can refuse thousands of sends a second).
    private var socketErrorLogs: TokenBucket
    /// Read times of packets forwarded since the last flush, for the latency histogram.
    @exclusivity(unchecked) private var forwardedReadTimes: [UInt64] = []
    private var lastStatisticsFlush: UInt64 = 0
    /// Room for a packet the relay builds on the forwarding path (a receiver report), so
    /// building it allocates nothing.
    let scratch: UnsafeMutableRawBufferPointer

    /// Datagrams per `sendmmsg`: the kernel's most (UIO_MAXIOV). A flush happens when this many
    /// are waiting, or at the end of every read batch; one read of 64 packets at fan-out 9 is
    /// one system call.
    static let maximumUnflushedWrites = 1_024

    init(configuration: RelayConfiguration, metrics: RelayMetrics, logger: Logger) {
        self.metrics = metrics
        self.logger = logger
        let limits = configuration.limits
        let now = MonotonicClock.now()
        socketErrorLogs = TokenBucket(ratePerSecond: 1, burst: 5, nowNanoseconds: now)
        lastStatisticsFlush = now
        // A datagram longer than max-packet-size arrives cut at its slot, and is dropped.
        receiveBatch = DatagramReceiveBatch(capacity: configuration.vectorReadCount, slotSize: limits.maximumPacketSize)
        // The largest datagram written: a forwarded packet (at most the size limit) or one the
        // relay builds (rosters are paged to 1,200 bytes), sealed.
        sendBatch = DatagramSendBatch(
            messageCapacity: Self.maximumUnflushedWrites,
            largestDatagram: max(limits.maximumPacketSize, 2_048) + SealedHeader.overhead)
        scratch = .allocate(byteCount: max(LegRTCP.maximumReportSize, 2_048), alignment: 16)
        forwardedReadTimes.reserveCapacity(4096)
    }

    deinit { scratch.deallocate() }

    // MARK: The socket

    func attach(descriptor: CInt) {
        self.descriptor = descriptor
    }

    var isOpen: Bool { descriptor >= 0 }

    /// Closes the socket (on the loop, or after it stopped): what was not sent is gone.
    func close() {
        guard descriptor >= 0 else { return }
        Glibc.close(descriptor)
        descriptor = -1
        sendBatch.discard()
        forwardedReadTimes.removeAll(keepingCapacity: true)
    }

    /// Reads a batch: how many datagrams arrived (0: none waiting). An error is logged, within
    /// its rate, and reads as none.
    func read() -> Int {
        guard descriptor >= 0 else { return 0 }
        let count = receiveBatch.receive(on: descriptor)
        guard count < 0 else { return count }
        if socketErrorLogs.allow(nowNanoseconds: MonotonicClock.now()) {
            logger.warning("reading the relay socket failed; the relay carries on", metadata: [
                "error": "\(String(cString: strerror(Int32(-count))))",
            ])
        }
        return 0
    }

    // MARK: Writing

    /// Seals `packet` for its receiver (`transport`) into the send batch, flushing it first
    /// when full; false if nothing was written.
    @inline(__always)
    func write(_ packet: UnsafeRawBufferPointer, to destination: DatagramAddress, transport: any LegTransport, kind: SentKind, now: UInt64) -> Bool {
        guard descriptor >= 0 else { return false }
        let size = transport.sealedSize(plaintextCount: packet.count)
        if !sendBatch.hasRoom(for: size) { flush() }
        // After a flush the batch is empty, and it has room for its largest datagram (a packet
        // within max-packet-size, sealed); checked all the same.
        guard sendBatch.hasRoom(for: size) else {
            drop(.oversize)
            return false
        }
        let written = sendBatch.append(to: destination, kind: kind, maximumSize: size) { slot in
            transport.seal(packet, into: slot, nowNanoseconds: now)
        }
        return written > 0
    }

    /// What the relay builds itself (replies, control messages, reports), sealed for its
    /// receiver, sent with the forwarded media.
    func send(_ bytes: [UInt8], to destination: DatagramAddress, transport: any LegTransport = PlaintextTransport.shared, kind: SentKind) {
        guard !bytes.isEmpty else { return }
        let now = MonotonicClock.now()
        _ = bytes.withUnsafeBytes { write($0, to: destination, transport: transport, kind: kind, now: now) }
    }

    /// Bytes for a leg, sealed with its transport.
    func send(_ bytes: [UInt8], to leg: Leg, kind: SentKind) {
        send(bytes, to: leg.destination, transport: leg.transport, kind: kind)
    }

    /// The first `count` bytes of ``scratch``, for a leg.
    func sendScratch(_ count: Int, to leg: Leg, kind: SentKind, now: UInt64) {
        guard count > 0 else { return }
        _ = write(UnsafeRawBufferPointer(rebasing: scratch[0..<count]), to: leg.destination, transport: leg.transport, kind: kind, now: now)
    }

    /// A packet read at `now` was forwarded: its time in the relay goes in the latency histogram at the flush.
    @inline(__always)
    func forwarded(readAt now: UInt64) {
        if forwardedReadTimes.count < forwardedReadTimes.capacity { forwardedReadTimes.append(now) }
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
                if socketErrorLogs.allow(nowNanoseconds: MonotonicClock.now()) {
                    let message: Logger.Message = outcome.lastError == EMSGSIZE
                        ? "a copy was larger than the network interface's MTU and is sent with don't-fragment, so the kernel refused it; lower max-packet-size (1,400 fits any common path)"
                        : "the kernel refused to send to a member's address; check the firewall's outgoing rules"
                    logger.warning(message, metadata: [
                        "error": "\(String(cString: strerror(outcome.lastError)))", "refused": "\(outcome.failed)",
                    ])
                }
            }
        }
        if !forwardedReadTimes.isEmpty {
            let end = MonotonicClock.now()
            for start in forwardedReadTimes {
                metrics.forwardingLatency.recordNanoseconds(Int64(end &- start))
            }
            forwardedReadTimes.removeAll(keepingCapacity: true)
        }
    }

    // MARK: Counting

    @inline(__always) func received(_ kind: PacketKind, bytes: Int) {
        statistics.received(kind, bytes: bytes)
    }

    @inline(__always) func drop(_ reason: DropReason, count: Int = 1) {
        statistics.dropped(reason, count: count)
    }

    /// Adds this loop's counts to the metrics (before a scrape, and twice a second).
    func flushStatistics(now: UInt64 = MonotonicClock.now()) {
        statistics.flush(into: metrics)
        lastStatisticsFlush = now
    }

    /// Flushes the counts when half a second has passed since the last time.
    func flushStatisticsIfDue(now: UInt64) {
        if now &- lastStatisticsFlush >= 500_000_000 { flushStatistics(now: now) }
    }
}
