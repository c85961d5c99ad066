import Histogram

/// The distribution of a set of delays: count, exact mean and standard deviation, and
/// percentiles to within 1%.
///
/// Mean and variance are kept exactly with Welford's running update, so a test can compare
/// a measured standard deviation with the configured jitter without histogram error. The
/// percentiles come from an HDR histogram (two significant digits, nanosecond units, grown
/// as needed), which keeps memory fixed however long a proxy runs: a few kilobytes per
/// direction of each flow.
public struct DelayStatistics: Sendable {
    public private(set) var count = 0
    private var runningMean = 0.0
    private var sumOfSquaredDeviations = 0.0
    private var smallest = Int64.max
    private var largest = Int64.min
    private var histogram = Histogram<UInt64>(numberOfSignificantValueDigits: .two)

    public init() {}

    /// Adds one delay, in nanoseconds. A negative delay (possible only in virtual time, when
    /// a receiver's clock runs fast) counts in the mean and spread as it is, and as zero in
    /// the percentiles.
    public mutating func record(nanoseconds delay: Int64) {
        count += 1
        let value = Double(delay)
        let deviation = value - runningMean
        runningMean += deviation / Double(count)
        sumOfSquaredDeviations += deviation * (value - runningMean)
        smallest = Swift.min(smallest, delay)
        largest = Swift.max(largest, delay)
        histogram.record(UInt64(Swift.max(delay, 0)))
    }

    public mutating func record(_ delay: Duration) {
        record(nanoseconds: delay.nanoseconds)
    }

    /// Folds another set of delays into this one (Chan et al.'s parallel variance update).
    public mutating func merge(_ other: DelayStatistics) {
        guard other.count > 0 else { return }
        guard count > 0 else {
            self = other
            return
        }
        let total = Double(count + other.count)
        let delta = other.runningMean - runningMean
        sumOfSquaredDeviations += other.sumOfSquaredDeviations
            + delta * delta * Double(count) * Double(other.count) / total
        runningMean += delta * Double(other.count) / total
        count += other.count
        smallest = Swift.min(smallest, other.smallest)
        largest = Swift.max(largest, other.largest)
        histogram.add(other.histogram)
    }

    public var mean: Duration { .nanoseconds(Int64(runningMean.rounded())) }

    /// The population standard deviation (zero for fewer than two delays).
    public var standardDeviation: Duration {
        guard count > 1 else { return .zero }
        return .nanoseconds(Int64((sumOfSquaredDeviations / Double(count)).squareRoot().rounded()))
    }

    public var minimum: Duration { count == 0 ? .zero : .nanoseconds(smallest) }
    public var maximum: Duration { count == 0 ? .zero : .nanoseconds(largest) }

    /// The delay below which `percent` of the delays lie (zero when there are none).
    public func percentile(_ percent: Double) -> Duration {
        guard count > 0 else { return .zero }
        return .nanoseconds(Int64(clamping: histogram.valueAtPercentile(percent)))
    }

    public var median: Duration { percentile(50) }
}
