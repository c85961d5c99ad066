/// Durations as people write them: a number and a unit, or several ("40ms", "1.5s",
/// "250us", "30s", "2m", "24h", "7d", "1h30m"). Units: `ns`, `us` or `µs`, `ms`, `s`,
/// `m` or `min`, `h`, `d`. No spaces inside; the text around is trimmed.
///
/// A bare number is not parsed here: what it means (seconds for the relay's settings, an
/// error for a network delay) is the caller's to say.
public enum DurationText {
    /// The duration in nanoseconds; nil if the text is not one, or is beyond ±292 years.
    public static func nanoseconds(_ text: some StringProtocol) -> Int64? {
        var rest = Substring(text.trimmingWhitespace.lowercased())
        let negative = rest.first == "-"
        if negative { rest = rest.dropFirst() }
        guard !rest.isEmpty else { return nil }
        var total = 0.0
        while !rest.isEmpty {
            let number = rest.prefix { $0.isASCII && ($0.isNumber || $0 == ".") }
            rest = rest.dropFirst(number.count)
            let unit = rest.prefix { $0.isLetter }
            rest = rest.dropFirst(unit.count)
            guard number.first?.isNumber == true, let value = Double(number), let scale = Self.scale(of: unit) else { return nil }
            total += value * scale
        }
        guard total < 9.2e18 else { return nil }
        let nanoseconds = Int64(total.rounded())
        return negative ? -nanoseconds : nanoseconds
    }

    /// Whole milliseconds, for settings counted in them; a bare whole number is seconds.
    /// Nil for a negative duration or one that is not a whole number of milliseconds.
    public static func milliseconds(_ text: some StringProtocol) -> Int? {
        let trimmed = text.trimmingWhitespace
        if let seconds = Int(trimmed) {
            let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000)
            return overflow || seconds < 0 ? nil : product
        }
        guard let nanoseconds = nanoseconds(trimmed), nanoseconds >= 0, nanoseconds % 1_000_000 == 0 else { return nil }
        return Int(nanoseconds / 1_000_000)
    }

    private static func scale(of unit: Substring) -> Double? {
        switch unit {
        case "ns": return 1
        case "us", "µs", "μs": return 1e3
        case "ms": return 1e6
        case "s": return 1e9
        case "m", "min": return 60e9
        case "h": return 3_600e9
        case "d": return 86_400e9
        default: return nil
        }
    }
}
