/// Datagrams waiting for their delivery time: a binary min-heap on (time, order of
/// insertion), so the proxy arms one timer for the earliest and finds every due datagram
/// in O(log n). Items due at the same time come out in the order they went in, which keeps
/// a FIFO path FIFO.
struct DeliveryQueue<Item> {
    private struct Entry {
        let deadline: Int64
        let order: UInt64
        let item: Item

        func precedes(_ other: Entry) -> Bool {
            deadline < other.deadline || (deadline == other.deadline && order < other.order)
        }
    }

    private var heap: [Entry] = []
    private var insertions: UInt64 = 0

    var count: Int { heap.count }
    var isEmpty: Bool { heap.isEmpty }

    /// The earliest deadline waiting, if any.
    var nextDeadline: Int64? { heap.first?.deadline }

    mutating func insert(_ item: Item, at deadline: Int64) {
        heap.append(Entry(deadline: deadline, order: insertions, item: item))
        insertions &+= 1
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].precedes(heap[parent]) else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes and returns the earliest item if it is due at or before `time`.
    mutating func popDue(by time: Int64) -> Item? {
        guard let first = heap.first, first.deadline <= time else { return nil }
        let last = heap.removeLast()
        guard !heap.isEmpty else { return first.item }
        heap[0] = last
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < heap.count && heap[left].precedes(heap[smallest]) { smallest = left }
            if right < heap.count && heap[right].precedes(heap[smallest]) { smallest = right }
            guard smallest != parent else { break }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
        return first.item
    }

    mutating func removeAll() {
        heap.removeAll()
    }
}
