import ParleyWire

/// A text message of the room as the call keeps and shows it: who wrote it, when, and the
/// words made safe for a terminal.
public struct RoomText: Codable, Equatable, Sendable {
    /// Who wrote it (this member, for what it sent).
    public var sender: String
    public var text: String
    /// Seconds into the call when it was sent or arrived.
    public var atSeconds: Double
    /// Whether this member sent it.
    public var outgoing: Bool

    /// Messages a call keeps (the status JSON and `--stats-json` carry them).
    public static let kept = 100

    /// A message as it arrived: anything that could move the cursor, clear the screen, forge
    /// a line or reorder what a person reads (control characters, escape sequences, line
    /// separators, bidirectional overrides) is shown as `\u{…}` instead of acting, in the
    /// sender's name too. The relay refuses control characters already; this does not
    /// count on it.
    public init(sender: String, text: String, atSeconds: Double, outgoing: Bool) {
        self.sender = sender.logSafe(limit: 64)
        self.text = text.logSafe(limit: ControlMessage.Text.maximumBytes)
        self.atSeconds = atSeconds
        self.outgoing = outgoing
    }

    /// `[1:02] bob: hello`
    public var line: String { "[\(CallStatusLine.clock(atSeconds))] \(sender): \(text)" }
}
