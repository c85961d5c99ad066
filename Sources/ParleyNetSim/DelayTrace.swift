import ParleyBasics
/// A recorded path, replayed packet by packet: what happened to the 1st, 2nd, 3rd… packet.
///
/// The format is plain text, one packet per line:
///
///     # Wi-Fi in the kitchen, 2026-11-20 (one line per 20 ms packet)
///     41.5
///     38
///     loss
///     120.25   # a retransmission
///
/// Each line is either a one-way delay in milliseconds (a non-negative decimal number) or
/// the word `loss`. Blank lines are skipped, and `#` starts a comment that runs to the end
/// of its line. The trace loops: packet *n* gets line *n* modulo its length, so a short
/// recording covers a long call. In the proxy each flow and direction replays it from its
/// first line.
///
/// A replayed delay joins the delay stage: it is added to any configured delay, jitter and
/// spike, and the reorder setting applies (without reordering, a packet still never
/// overtakes the one before it).
public struct DelayTrace: Sendable, Equatable {
    public enum Entry: Sendable, Equatable {
        case delay(Duration)
        case loss
    }

    public let entries: [Entry]
    /// Where the trace came from (a file name), for messages.
    public let source: String

    public init(entries: [Entry], source: String = "trace") throws(DelayTraceError) {
        guard !entries.isEmpty else { throw .empty(source: source) }
        self.entries = entries
        self.source = source
    }

    /// Parses the text format above; `source` names it in errors.
    public init(parsing text: String, source: String = "trace") throws(DelayTraceError) {
        var entries: [Entry] = []
        var lineNumber = 0
        for rawLine in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline) {
            lineNumber += 1
            let content = rawLine.prefix { $0 != "#" }.trimmingWhitespace
            guard !content.isEmpty else { continue }
            if content.lowercased() == "loss" {
                entries.append(.loss)
                continue
            }
            guard let milliseconds = Double(content), milliseconds.isFinite else {
                throw .notADelay(source: source, line: lineNumber, text: String(content))
            }
            guard milliseconds >= 0 else {
                throw .negativeDelay(source: source, line: lineNumber, text: String(content))
            }
            guard milliseconds <= Impairment.longestDelay.inMilliseconds else {
                throw .delayTooLong(source: source, line: lineNumber, text: String(content))
            }
            entries.append(.delay(.nanoseconds(Int64((milliseconds * 1e6).rounded()))))
        }
        try self.init(entries: entries, source: source)
    }

    /// The fraction of lines that are losses.
    public var lossRate: Double {
        Double(entries.lazy.filter { $0 == .loss }.count) / Double(entries.count)
    }
}

/// Why a trace could not be read. Each message names the file and line.
public enum DelayTraceError: Error, Sendable, Equatable, CustomStringConvertible {
    case empty(source: String)
    case notADelay(source: String, line: Int, text: String)
    case negativeDelay(source: String, line: Int, text: String)
    case delayTooLong(source: String, line: Int, text: String)
    case unreadable(source: String, reason: String)

    public var description: String {
        switch self {
        case .empty(let source), .notADelay(let source, _, _), .negativeDelay(let source, _, _),
            .delayTooLong(let source, _, _), .unreadable(let source, _):
            return "\(source) \(reason)."
        }
    }

    /// What is wrong, without the file's name: "line 3: '2O' is neither …".
    public var reason: String {
        switch self {
        case .empty:
            return "has no packets: give one line per packet, a delay in milliseconds or the word 'loss'"
        case let .notADelay(_, line, text):
            return "line \(line): '\(text)' is neither a delay in milliseconds (like 42.5) nor the word 'loss'"
        case let .negativeDelay(_, line, text):
            return "line \(line): the delay \(text) ms is negative; a packet cannot arrive before it is sent"
        case let .delayTooLong(_, line, text):
            return "line \(line): the delay \(text) ms is longer than the \(Int(Impairment.longestDelay.inMilliseconds / 1000)) s the simulator holds a packet"
        case let .unreadable(_, reason):
            return "cannot be read: \(reason)"
        }
    }
}

/// Replays a ``DelayTrace`` one packet at a time, looping at its end.
struct TraceReplay: Sendable {
    let trace: DelayTrace
    private var position = 0

    init(_ trace: DelayTrace) { self.trace = trace }

    /// The next packet's fate: nil when lost, else its replayed delay in nanoseconds.
    mutating func next() -> Int64? {
        let entry = trace.entries[position]
        position = (position + 1) % trace.entries.count
        switch entry {
        case .loss: return nil
        case .delay(let delay): return delay.nanoseconds
        }
    }
}
