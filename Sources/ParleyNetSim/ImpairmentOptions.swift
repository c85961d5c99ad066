import Foundation
import ParleyBasics

/// Impairment settings as written on the command line, and how they combine into the
/// ``Impairment`` of each direction.
///
/// `parley netsim` takes settings three ways, applied in this order, each overriding the
/// one before setting by setting:
///
/// 1. `--scenario NAME`: a named ``Scenario``'s values for each direction;
/// 2. plain flags (`--loss 5% --delay 40ms`): both directions;
/// 3. `--up LIST` and `--down LIST`: one direction, written as the flags' names and values
///    separated by commas: `--up loss=20%,burst=3 --down delay=80ms,reorder`.
public struct ImpairmentOptions: Sendable, Equatable {
    /// Each setting given, with its text as the user wrote it.
    public private(set) var values: [(setting: ImpairmentSetting, text: String)] = []
    /// How the user wrote these settings, for messages: "--" for plain flags, "--up " for a list.
    let origin: Origin

    public enum Origin: Sendable, Equatable {
        case flags
        case list(flag: String)
    }

    public init() { origin = .flags }

    /// Parses an `--up`/`--down` list such as `loss=20%,burst=3,reorder`.
    public init(list: String, flag: String) throws(ImpairmentOptionError) {
        origin = .list(flag: flag)
        for item in list.split(separator: ",") {
            let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = parts[0].trimmingWhitespace.lowercased()
            guard let setting = ImpairmentSetting(rawValue: name) else {
                let known = ImpairmentSetting.allCases.map(\.rawValue).joined(separator: ", ")
                throw ImpairmentOptionError(
                    "\(flag) \(list): '\(name)' is not a setting; use \(known), like \(flag) loss=5%,delay=40ms")
            }
            let text = parts.count > 1 ? String(parts[1]) : ""
            guard parts.count > 1 || setting == .reorder else {
                throw ImpairmentOptionError("\(flag) \(list): '\(name)' needs a value, like \(name)=\(setting.example)")
            }
            values.append((setting, text))
        }
    }

    public mutating func set(_ setting: ImpairmentSetting, _ text: String?) {
        guard let text else { return }
        values.removeAll { $0.setting == setting }
        values.append((setting, text))
    }

    public var isEmpty: Bool { values.isEmpty }

    public static func == (lhs: ImpairmentOptions, rhs: ImpairmentOptions) -> Bool {
        lhs.origin == rhs.origin && lhs.values.elementsEqual(rhs.values) { $0.setting == $1.setting && $0.text == $1.text }
    }

    /// How a setting was written, for messages: `--loss 150%` or `--up loss=150%`.
    func written(_ setting: ImpairmentSetting) -> String? {
        guard let entry = values.last(where: { $0.setting == setting }) else { return nil }
        switch origin {
        case .flags:
            return setting == .reorder ? "--\(entry.text == "no" ? "no-" : "")reorder" : "--\(setting.rawValue) \(entry.text)"
        case .list(let flag):
            return "\(flag) \(setting.rawValue)\(entry.text.isEmpty ? "" : "=" + entry.text)"
        }
    }

    /// Writes these settings into `impairment`; `traces` loads and caches trace files.
    func apply(to impairment: inout Impairment, traces: inout TraceLoader) throws(ImpairmentOptionError) {
        var spikeLength: Duration?
        for (setting, text) in values {
            do throws(ImpairmentSyntaxError) {
                switch setting {
                case .loss: impairment.loss = try ImpairmentValueSyntax.fraction(text)
                case .lossBurst: impairment.lossBurst = try ImpairmentValueSyntax.packets(text)
                case .delay: impairment.delay = try ImpairmentValueSyntax.duration(text)
                case .jitter: impairment.jitter = try ImpairmentValueSyntax.duration(text)
                case .jitterDistribution: impairment.jitterDistribution = try ImpairmentValueSyntax.distribution(text)
                case .reorder: impairment.reorder = try ImpairmentValueSyntax.boolean(text)
                case .spike: impairment.spike = try ImpairmentValueSyntax.spike(text)
                case .spikeLength: spikeLength = try ImpairmentValueSyntax.duration(text)
                case .duplicate: impairment.duplicate = try ImpairmentValueSyntax.fraction(text)
                case .rate: impairment.rate = try ImpairmentValueSyntax.bitRate(text)
                case .queue: impairment.queue = try ImpairmentValueSyntax.duration(text)
                case .drift: impairment.drift = try ImpairmentValueSyntax.partsPerMillion(text)
                case .trace: impairment.trace = try traces.load(text)
                }
            } catch {
                throw ImpairmentOptionError("\(written(setting) ?? setting.rawValue): \(error.reason)")
            }
        }
        if let spikeLength {
            guard impairment.spike != nil else {
                throw ImpairmentOptionError(
                    "\(written(.spikeLength)!): there is no spike to lengthen; add one, like --spike 300ms/10s")
            }
            impairment.spike!.length = spikeLength
        }
    }

    /// The impairment of each direction: a scenario (if named), then `both`, then the
    /// direction's own list; every result validated. Errors name the flag that caused them.
    public static func resolve(
        scenario name: String?, both: ImpairmentOptions, up: ImpairmentOptions, down: ImpairmentOptions
    ) throws(ImpairmentOptionError) -> (up: Impairment, down: Impairment) {
        var scenario = Scenario(name: "none", about: "", both: .none)
        if let name {
            do throws(ScenarioError) {
                scenario = try Scenario.named(name)
            } catch {
                throw ImpairmentOptionError("--scenario \(name): \(error.description.dropLast())")
            }
        }
        var traces = TraceLoader()
        func direction(_ base: Impairment, _ own: ImpairmentOptions) throws(ImpairmentOptionError) -> Impairment {
            var impairment = base
            try both.apply(to: &impairment, traces: &traces)
            try own.apply(to: &impairment, traces: &traces)
            do throws(ImpairmentError) {
                try impairment.validate()
            } catch {
                // Name the flag the user wrote; failing that, the one it combines with, or the scenario.
                let source = ([error.setting] + related(error.setting)).lazy
                    .compactMap { own.written($0) ?? both.written($0) }.first
                    ?? name.map { "--scenario \($0)" } ?? error.setting.rawValue
                throw ImpairmentOptionError("\(source): \(error.reason)")
            }
            return impairment
        }
        return (try direction(scenario.up, up), try direction(scenario.down, down))
    }

    /// Settings whose combination an error about `setting` may be caused by.
    private static func related(_ setting: ImpairmentSetting) -> [ImpairmentSetting] {
        switch setting {
        case .loss: return [.lossBurst]
        case .lossBurst: return [.loss]
        case .spike: return [.spikeLength]
        case .spikeLength: return [.spike]
        case .queue: return [.rate]
        case .jitter: return [.delay, .jitterDistribution]
        default: return []
        }
    }
}

/// A command-line setting that cannot be used: the flag as written, and why, in one
/// sentence.
public struct ImpairmentOptionError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message.hasSuffix("?") || message.hasSuffix(".") ? message : message + "." }
}

/// Reads trace files once each, however many directions use them.
struct TraceLoader {
    /// Traces are text a person or a script wrote; anything larger is not one.
    static let largestFile = 64 << 20
    private var loaded: [String: DelayTrace] = [:]

    mutating func load(_ path: String) throws(ImpairmentSyntaxError) -> DelayTrace {
        if let trace = loaded[path] { return trace }
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else {
            throw ImpairmentSyntaxError("cannot open '\(path)' (\(String(cString: strerror(errno)))); give the path of a trace file")
        }
        let file = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        let data: Data
        do {
            data = try file.read(upToCount: Self.largestFile + 1) ?? Data()
        } catch {
            throw ImpairmentSyntaxError("cannot read '\(path)' (\(String(cString: strerror(errno)))); give the path of a trace file")
        }
        guard data.count <= Self.largestFile else {
            throw ImpairmentSyntaxError("'\(path)' is larger than 64 MiB; a trace is a text file with one line per packet")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ImpairmentSyntaxError("'\(path)' is not UTF-8 text; a trace has one line per packet")
        }
        do throws(DelayTraceError) {
            let trace = try DelayTrace(parsing: text, source: path)
            loaded[path] = trace
            return trace
        } catch {
            throw ImpairmentSyntaxError(error.reason)
        }
    }
}

extension ImpairmentSetting {
    /// A value to show in a message that asks for one.
    var example: String {
        switch self {
        case .loss, .duplicate: return "5%"
        case .lossBurst: return "3"
        case .delay, .jitter: return "40ms"
        case .jitterDistribution: return "pareto"
        case .reorder: return "yes"
        case .spike: return "300ms/10s"
        case .spikeLength: return "1s"
        case .rate: return "64kbit"
        case .queue: return "200ms"
        case .drift: return "300ppm"
        case .trace: return "path/to/trace.txt"
        }
    }
}
