/// What an ``ImpairmentPipeline`` did to the packets offered to it, end to end: what a
/// receiver would count if it could see everything.
public struct ImpairmentReport: Sendable {
    /// Packets offered to the pipeline.
    public var packets = 0
    /// Packets lost on the path (by the loss model or a trace's `loss` lines).
    public var lost = 0
    /// Copies dropped at the tail of a full bottleneck queue.
    public var queueDropped = 0
    /// Extra copies made by duplication.
    public var duplicated = 0
    /// Copies delivered, duplicates included.
    public var delivered = 0
    /// Delivered copies that arrived after a packet sent later (RFC 4737).
    public var reordered = 0
    /// From send to arrival, for every delivered copy.
    public var delay = DelayStatistics()

    public init() {}

    /// Packets lost on the path or dropped by the queue, over packets offered.
    public var lossRate: Double {
        packets == 0 ? 0 : Double(lost + queueDropped) / Double(packets)
    }

    public mutating func merge(_ other: ImpairmentReport) {
        packets += other.packets
        lost += other.lost
        queueDropped += other.queueDropped
        duplicated += other.duplicated
        delivered += other.delivered
        reordered += other.reordered
        delay.merge(other.delay)
    }

    /// One line for people: "10000 packets, lost 1003 (10.0%), …, delay 30.1 ± 10.0 ms,
    /// p50 30.0 p95 46.4 p99 53.3 ms" (mean ± standard deviation, to hold against
    /// `--delay` and `--jitter`; then percentiles).
    public var summary: String {
        var parts = ["\(packets) packet\(packets == 1 ? "" : "s")", "lost \(lost) (\(Format.share(lost, of: packets)))"]
        if queueDropped > 0 { parts.append("queue drops \(queueDropped)") }
        parts.append("duplicated \(duplicated)")
        parts.append("reordered \(reordered)")
        if delay.count > 0 {
            parts.append(
                "delay \(Format.milliseconds(delay.mean)) ± \(Format.milliseconds(delay.standardDeviation)) ms, "
                    + "p50 \(Format.milliseconds(delay.median)) p95 \(Format.milliseconds(delay.percentile(95))) "
                    + "p99 \(Format.milliseconds(delay.percentile(99))) ms")
        }
        return parts.joined(separator: ", ")
    }
}
