/// A bottleneck link (`--rate`, `--queue`): packets leave one after another at
/// `bitsPerSecond`, wait in a FIFO queue in front of it, and are dropped at the tail when
/// the queue is full.
///
/// The queue is virtual: the link only remembers when it will have sent the last packet it
/// admitted, which is all a FIFO at a fixed rate needs. The backlog a packet finds
/// is that time minus its arrival. The queue's size is given as time (`queueLimit`: the
/// longest a packet may wait in it, like `tc tbf latency`), which does not depend on packet
/// sizes; 200 ms at 64 kbit/s is 1,600 bytes.
///
/// Sizes count the UDP payload plus 28 bytes of IPv4 and UDP headers, as the link carries
/// them: at 50 packets a second those headers alone take 11 kbit/s.
///
/// A packet that finds the link idle is always admitted, even one that takes longer than
/// `queueLimit` to send, so a slow link still passes large packets one at a time. Packets
/// must be offered in order of arrival.
public struct BottleneckLink: Sendable {
    public static let headerOverheadBytes = 28

    public let bitsPerSecond: Int
    public let queueLimit: Duration
    private let queueLimitNanoseconds: Int64
    /// When the link finishes sending the last admitted packet; nil before the first.
    private var linkFreeAt: Int64?
    public private(set) var report = BottleneckReport()

    public init(bitsPerSecond: Int, queueLimit: Duration) {
        precondition(bitsPerSecond > 0, "rate \(bitsPerSecond) bit/s must be positive; validate with Impairment.validate()")
        precondition(queueLimit >= .zero, "queue limit must not be negative; validate with Impairment.validate()")
        self.bitsPerSecond = bitsPerSecond
        self.queueLimit = queueLimit
        queueLimitNanoseconds = queueLimit.nanoseconds
    }

    /// Time to put a packet of `size` payload bytes on the link.
    public func transmissionTime(size: Int) -> Int64 {
        Int64((Double(size + Self.headerOverheadBytes) * 8 * 1e9 / Double(bitsPerSecond)).rounded(.up))
    }

    /// Offers a packet arriving at `arrival` (nanoseconds); returns when its last bit leaves
    /// the link, or nil when the queue is full and the packet is dropped.
    public mutating func departure(arrival: Int64, size: Int) -> Int64? {
        report.packets += 1
        let backlog = linkFreeAt.map { max(0, $0 - arrival) } ?? 0
        let sendTime = transmissionTime(size: size)
        if backlog > 0 && backlog + sendTime > queueLimitNanoseconds {
            report.tailDropped += 1
            return nil
        }
        let departure = arrival + backlog + sendTime
        linkFreeAt = departure
        report.queueing.record(nanoseconds: backlog + sendTime)
        return departure
    }
}

public struct BottleneckReport: Sendable {
    public internal(set) var packets = 0
    /// Packets dropped because the queue was full.
    public internal(set) var tailDropped = 0
    /// Time from arrival at the queue to the last bit on the link, for admitted packets.
    public internal(set) var queueing = DelayStatistics()

    public init() {}

    public var dropRate: Double { packets == 0 ? 0 : Double(tailDropped) / Double(packets) }

    public mutating func merge(_ other: BottleneckReport) {
        packets += other.packets
        tailDropped += other.tailDropped
        queueing.merge(other.queueing)
    }
}
