import ParleyBasics
/// How impairment values are written on the command line, and what each written form means.
///
/// | kind | written as | examples |
/// | --- | --- | --- |
/// | fraction | a percentage, or a fraction from 0 to 1 | `5%`, `0.5%`, `0.05` |
/// | duration | a number and a unit: `us`, `ms`, `s` | `40ms`, `1.5s`, `250us`, `0` |
/// | bit rate | a number and `bit`, `kbit`, `mbit` or `gbit` (per second) | `64kbit`, `1.5mbit` |
/// | spike | extra delay `/` period | `300ms/10s` |
/// | drift | parts per million, `ppm` optional, signed | `300ppm`, `-300ppm`, `+50` |
/// | burst | a number of packets, at least 1 | `3`, `2.5` |
///
/// Parsers return the value or a reason that says what is allowed; range checks that do not
/// depend on the syntax live in ``Impairment/validate()``.
public enum ImpairmentValueSyntax {
    public static func fraction(_ text: String) throws(ImpairmentSyntaxError) -> Double {
        let trimmed = text.trimmingWhitespace
        if trimmed.hasSuffix("%") {
            guard let percent = Double(trimmed.dropLast().trimmingWhitespace), percent.isFinite else {
                throw ImpairmentSyntaxError("'\(text)' is not a percentage; write it like 5% or 0.5%")
            }
            return percent / 100
        }
        guard let fraction = Double(trimmed), fraction.isFinite else {
            throw ImpairmentSyntaxError("'\(text)' is not a percentage; write it like 5% or as a fraction like 0.05")
        }
        guard fraction <= 1 || fraction < 0 else {
            throw ImpairmentSyntaxError(
                "a plain number is a fraction from 0 to 1; for \(Format.number(fraction)) percent write \(Format.number(fraction))%")
        }
        return fraction
    }

    public static func duration(_ text: String) throws(ImpairmentSyntaxError) -> Duration {
        let trimmed = text.trimmingWhitespace
        if let nanoseconds = DurationText.nanoseconds(trimmed) {
            guard abs(nanoseconds) < 1_000_000_000_000_000_000 else {
                throw ImpairmentSyntaxError("'\(text)' is longer than anything a network does; give a duration like 40ms or 1s")
            }
            return .nanoseconds(nanoseconds)
        }
        if let value = Double(trimmed) {
            if value == 0 { return .zero }
            throw ImpairmentSyntaxError("'\(text)' needs a unit; write it like \(trimmed)ms or \(trimmed)s")
        }
        throw ImpairmentSyntaxError("'\(text)' is not a duration; write it like 40ms, 1.5s or 250us")
    }

    public static func bitRate(_ text: String) throws(ImpairmentSyntaxError) -> Int {
        let trimmed = text.trimmingWhitespace.lowercased()
        let bare = trimmed.hasSuffix("/s") ? String(trimmed.dropLast(2)) : trimmed
        let units: [(suffix: String, bits: Double)] = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1)]
        for unit in units where bare.hasSuffix(unit.suffix) {
            guard let value = Double(bare.dropLast(unit.suffix.count).trimmingWhitespace), value.isFinite else { break }
            guard value > 0 else {
                throw ImpairmentSyntaxError("a rate must be more than zero, like 64kbit or 1mbit")
            }
            guard value * unit.bits < 1e12 else {
                throw ImpairmentSyntaxError("'\(text)' is faster than any link; give a rate like 64kbit or 1mbit")
            }
            return Int((value * unit.bits).rounded())
        }
        if bare.hasSuffix("bps") {
            throw ImpairmentSyntaxError("'\(text)' is ambiguous (bits or bytes?); write bits per second like 64kbit or 1mbit")
        }
        throw ImpairmentSyntaxError("'\(text)' is not a rate; write bits per second like 64kbit, 1.5mbit or 500000bit")
    }

    /// `EXTRA/PERIOD`, like `300ms/10s`; the spike's length is a separate setting.
    public static func spike(_ text: String, length: Duration = DelaySpike.defaultLength) throws(ImpairmentSyntaxError) -> DelaySpike {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else {
            throw ImpairmentSyntaxError("'\(text)' is not a spike; write the extra delay and how often, like 300ms/10s")
        }
        return DelaySpike(extraDelay: try duration(String(parts[0])), every: try duration(String(parts[1])), lasting: length)
    }

    public static func partsPerMillion(_ text: String) throws(ImpairmentSyntaxError) -> Double {
        var trimmed = text.trimmingWhitespace.lowercased()
        if trimmed.hasSuffix("ppm") { trimmed = String(trimmed.dropLast(3)).trimmingWhitespace }
        guard let value = Double(trimmed), value.isFinite else {
            throw ImpairmentSyntaxError("'\(text)' is not a drift; write parts per million like 300ppm or -300ppm")
        }
        return value
    }

    public static func packets(_ text: String) throws(ImpairmentSyntaxError) -> Double {
        guard let value = Double(text.trimmingWhitespace), value.isFinite else {
            throw ImpairmentSyntaxError("'\(text)' is not a number of packets; write a mean burst length like 3")
        }
        return value
    }

    public static func boolean(_ text: String) throws(ImpairmentSyntaxError) -> Bool {
        switch text.trimmingWhitespace.lowercased() {
        case "", "yes", "true", "on", "1": return true
        case "no", "false", "off", "0": return false
        default: throw ImpairmentSyntaxError("'\(text)' is not yes or no")
        }
    }

    public static func distribution(_ text: String) throws(ImpairmentSyntaxError) -> JitterDistribution {
        guard let distribution = JitterDistribution(rawValue: text.trimmingWhitespace.lowercased()) else {
            let names = JitterDistribution.allCases.map(\.rawValue).joined(separator: " or ")
            throw ImpairmentSyntaxError("'\(text)' is not a jitter distribution; choose \(names)")
        }
        return distribution
    }
}

/// Why a written value could not be read, as a phrase that says what is allowed.
public struct ImpairmentSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    public let reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}
