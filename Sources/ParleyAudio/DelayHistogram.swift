/// The distribution of recent arrival delays, with exponential forgetting: each new delay
/// weighs a fixed share, so a delay `memory` packets old counts 1/e as much as a new one.
/// The first packets count equally (a plain average) until there are `memory` of them, so
/// a new stream's estimate is right after a few dozen packets rather than after its memory.
///
/// Buckets of 1 ms up to 1 s (longer delays count as 1 s); a quantile is read with a walk
/// from the top, short for the high quantiles a jitter buffer asks for. No allocation
/// after `init`.
struct DelayHistogram {
    static let bucketSeconds = 0.001
    static let bucketCount = 1_000

    /// Packets after which a delay's weight has fallen to 1/e.
    let memory: Double
    private var buckets: [Double]
    private(set) var count = 0

    init(memoryPackets: Double) {
        memory = max(1, memoryPackets)
        buckets = [Double](repeating: 0, count: Self.bucketCount)
    }

    mutating func add(_ delaySeconds: Double) {
        count += 1
        let keep = min(1 - 1 / memory, 1 - 1 / Double(count))
        let index = min(Self.bucketCount - 1, max(0, Int(delaySeconds / Self.bucketSeconds)))
        for bucket in 0..<Self.bucketCount { buckets[bucket] *= keep }
        buckets[index] += 1 - keep
    }

    /// The delay below which `fraction` of the weight lies (the upper edge of its bucket),
    /// seconds; 0 before the first delay.
    func quantile(_ fraction: Double) -> Double {
        guard count > 0 else { return 0 }
        var total = 0.0
        for bucket in buckets { total += bucket }
        let above = (1 - fraction) * total
        var sum = 0.0
        var index = Self.bucketCount - 1
        while index > 0 {
            sum += buckets[index]
            if sum > above { break }
            index -= 1
        }
        return Double(index + 1) * Self.bucketSeconds
    }

    mutating func reset() {
        for bucket in 0..<Self.bucketCount { buckets[bucket] = 0 }
        count = 0
    }
}
