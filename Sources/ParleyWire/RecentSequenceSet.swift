/// The last 64 sequence numbers of reliable messages received, so a message sent again
/// (its acknowledgement was lost) is acted on once: the client's link and the relay's trunks
/// both keep one.
public struct RecentSequenceSet: Sendable {
    private var recent: [UInt32] = []

    public init() {}

    /// Returns false when `sequence` was already seen.
    public mutating func insert(_ sequence: UInt32) -> Bool {
        if recent.contains(sequence) { return false }
        recent.append(sequence)
        if recent.count > 64 { recent.removeFirst() }
        return true
    }
}
