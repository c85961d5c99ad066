/// The last 64 reliable sequence numbers seen, so a retransmitted message is acknowledged
/// again but acted on once.
struct RecentSequenceSet {
    private var recent: [UInt32] = []

    /// Returns false when `sequence` was already seen.
    mutating func insert(_ sequence: UInt32) -> Bool {
        if recent.contains(sequence) { return false }
        recent.append(sequence)
        if recent.count > 64 { recent.removeFirst() }
        return true
    }
}
