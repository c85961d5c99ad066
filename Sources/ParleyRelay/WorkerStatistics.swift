import ParleyWire

/// The relay counts what arrives by its ``PacketKind``.
extension PacketKind {
    /// The kind's slot in ``WorkerStatistics/receivedPackets`` and the metrics' counters, which
    /// are both laid out in `allCases` order: its position there.
    @inline(__always) var index: Int {
        switch self {
        case .rtp: return 0
        case .rtcp: return 1
        case .control: return 2
        case .handshake: return 3
        case .sealed: return 4
        case .stun: return 5
        case .dtls: return 6
        case .unknown: return 7
        }
    }
}

/// What the relay sent.
enum SentKind: Int, CaseIterable {
    /// RTP forwarded to a receiver.
    case media
    /// Sender reports forwarded, and the relay's own receiver reports.
    case rtcp
    case control

    var label: String {
        switch self {
        case .media: return "media"
        case .rtcp: return "rtcp"
        case .control: return "control"
        }
    }
}

/// One event loop's counts since its last flush: plain integers, no atomics, because only
/// that loop writes them.
struct WorkerStatistics {
    var receivedPackets = [Int](repeating: 0, count: PacketKind.allCases.count)
    var receivedBytes = 0
    var sentPackets = [Int](repeating: 0, count: SentKind.allCases.count)
    var sentBytes = 0
    var drops = [Int](repeating: 0, count: DropReason.allCases.count)

    @inline(__always) mutating func received(_ kind: PacketKind, bytes: Int) {
        receivedPackets[kind.index] &+= 1
        receivedBytes &+= bytes
    }

    @inline(__always) mutating func sent(_ kind: SentKind, bytes: Int, count: Int = 1) {
        sentPackets[kind.rawValue] &+= count
        sentBytes &+= bytes &* count
    }

    @inline(__always) mutating func dropped(_ reason: DropReason, count: Int = 1) {
        drops[reason.rawValue] &+= count
    }

    /// Adds the counts to `metrics` and starts again from zero.
    mutating func flush(into metrics: RelayMetrics) {
        for index in receivedPackets.indices where receivedPackets[index] > 0 {
            metrics.packetsReceived[index].increment(by: receivedPackets[index])
            receivedPackets[index] = 0
        }
        for index in sentPackets.indices where sentPackets[index] > 0 {
            metrics.packetsSent[index].increment(by: sentPackets[index])
            sentPackets[index] = 0
        }
        for index in drops.indices where drops[index] > 0 {
            metrics.drops[index].increment(by: drops[index])
            drops[index] = 0
        }
        if receivedBytes > 0 { metrics.bytesReceived.increment(by: receivedBytes) }
        if sentBytes > 0 { metrics.bytesSent.increment(by: sentBytes) }
        receivedBytes = 0
        sentBytes = 0
    }
}
