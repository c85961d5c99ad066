import ParleyBasics
/// The text format of the relay's secret file and config file: one `key = value` per line,
/// `#` starts a comment line, blank lines are ignored. A person can read and edit it, and
/// `parley-relay keygen` can add a `relay-private-key = …` line later without a new format.
///
/// ```
/// # parley-relay configuration
/// listen = 0.0.0.0:7800
/// max-rooms = 500
/// ```
public struct KeyValueFile: Sendable, Hashable {
    public struct Entry: Sendable, Hashable {
        public var key: String
        public var value: String
        /// 1-based, for error messages.
        public var line: Int
    }

    public var entries: [Entry]
    /// What the text is, for error messages ("/etc/parley/relay.conf").
    public var source: String

    public init(parsing text: String, source: String) throws(ConfigurationError) {
        self.source = source
        entries = []
        var seen: [String: Int] = [:]
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let lineNumber = index + 1
            let line = rawLine.trimmingWhitespace
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let equals = line.firstIndex(of: "=") else {
                throw ConfigurationError("\(source):\(lineNumber): expected `key = value`, found \"\(line.prefix(60))\"")
            }
            let key = String(line[..<equals]).trimmingWhitespace
            let value = String(line[line.index(after: equals)...]).trimmingWhitespace
            guard !key.isEmpty else { throw ConfigurationError("\(source):\(lineNumber): the line has no key before '='") }
            if let previous = seen[key] {
                throw ConfigurationError("\(source):\(lineNumber): \(key) is already set on line \(previous); keep one")
            }
            seen[key] = lineNumber
            entries.append(Entry(key: key, value: value, line: lineNumber))
        }
    }

    public subscript(key: String) -> Entry? { entries.first { $0.key == key } }

    /// Fails naming the first key not in `known`, with the keys that are.
    public func checkKeys(known: [String]) throws(ConfigurationError) {
        for entry in entries where !known.contains(entry.key) {
            throw ConfigurationError("\(source):\(entry.line): unknown setting \"\(entry.key)\"; known settings: \(known.joined(separator: ", "))")
        }
    }
}
