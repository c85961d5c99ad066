import Logging

/// Log lines of one kind (a member joined, a join was refused) at most at a steady rate,
/// with a count of those left out: a flood of joins or refusals must not become a flood of
/// lines, or it fills the disk (a member rejoining in a loop can cause thousands a second).
///
/// One per event loop, so no lock; time is passed in.
struct ThrottledLog {
    private let logger: Logger
    private let what: String
    private var budget: TokenBucket
    private var suppressed = 0
    private var suppressedSince: UInt64 = 0
    /// How often the count of lines left out is reported while lines are being left out.
    static let summaryIntervalNanoseconds: UInt64 = 10_000_000_000

    /// - Parameters:
    ///   - what: names the lines in the summary ("membership", "refused join").
    init(_ logger: Logger, what: String, perSecond: Int, burst: Int, nowNanoseconds: UInt64) {
        self.logger = logger
        self.what = what
        budget = TokenBucket(ratePerSecond: perSecond, burst: burst, nowNanoseconds: nowNanoseconds)
    }

    /// Logs the line if the budget allows; counts it otherwise.
    mutating func log(_ level: Logger.Level, _ message: @autoclosure () -> Logger.Message,
                      metadata: @autoclosure () -> Logger.Metadata? = nil, now: UInt64) {
        guard logger.logLevel <= level else { return }
        if budget.allow(nowNanoseconds: now) {
            logger.log(level: level, message(), metadata: metadata())
        } else {
            if suppressed == 0 { suppressedSince = now }
            suppressed += 1
        }
        flushSummary(now: now)
    }

    /// Reports the lines left out, once ``summaryIntervalNanoseconds`` has passed since the first.
    mutating func flushSummary(now: UInt64) {
        guard suppressed > 0, now &- suppressedSince >= Self.summaryIntervalNanoseconds else { return }
        logger.notice("\(what) lines left out to spare the log", metadata: [
            "lines": "\(suppressed)", "seconds": "\((now &- suppressedSince) / 1_000_000_000)",
        ])
        suppressed = 0
    }
}
