extension StringProtocol {
    /// The text as it may appear in a log line or on a terminal, when it came from the
    /// network (the relay's logs, the text messages a call shows): control
    /// characters (a newline would forge a line of its own), bidirectional overrides and
    /// isolates (which reorder what a person reads) and line separators are shown as
    /// `\u{…}`, and it is cut to `limit` characters.
    public func logSafe(limit: Int = 64) -> String {
        var result = ""
        for scalar in unicodeScalars.prefix(limit) {
            if scalar.changesHowTextReads {
                result += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        if unicodeScalars.count > limit { result += "…" }
        return result
    }
}
