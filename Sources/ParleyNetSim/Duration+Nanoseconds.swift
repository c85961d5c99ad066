extension Duration {
    /// The duration in whole nanoseconds (truncated; saturating beyond ±292 years).
    ///
    /// The models compute in `Int64` nanoseconds: exact, cheap on the per-packet path, and
    /// fine enough for timing that a network never resolves below a microsecond.
    public var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return product.addingReportingOverflow(attoseconds / 1_000_000_000).partialValue
    }

    /// The duration in milliseconds, for reports and messages.
    public var inMilliseconds: Double { Double(nanoseconds) / 1e6 }
}
