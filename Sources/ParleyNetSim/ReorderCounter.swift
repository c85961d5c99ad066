/// Counts reordered packets as a receiver would see them (RFC 4737): a copy is reordered
/// when a packet sent after it arrives before it. Each copy counts once; a copy overtaken
/// only by its own duplicate is not reordered.
///
/// Copies are offered in the order they were sent, each with its delivery time. Those not
/// yet overtaken are kept sorted by delivery time (a monotonic stack): a new copy overtakes
/// exactly those at the top of the stack that are delivered later than it. A copy delivered
/// before the current arrival time can never be overtaken again (no later packet arrives
/// before it entered the path), so the bottom of the stack is trimmed as time passes and
/// the stack stays as short as the number of packets in flight.
struct ReorderCounter: Sendable {
    private var pending: [(delivery: Int64, packet: Int)] = []
    private var bottom = 0
    private(set) var reordered = 0

    /// Records copy of `packet` that entered the path at `arrival` and leaves it at
    /// `delivery` (≥ `arrival`). Arrivals must not decrease.
    mutating func record(packet: Int, arrival: Int64, delivery: Int64) {
        while bottom < pending.count && pending[bottom].delivery <= arrival { bottom += 1 }
        while pending.count > bottom, let top = pending.last, top.delivery > delivery {
            pending.removeLast()
            if top.packet != packet { reordered += 1 }
        }
        pending.append((delivery, packet))
        if bottom >= 256 && bottom * 2 >= pending.count {
            pending.removeFirst(bottom)
            bottom = 0
        }
    }
}
