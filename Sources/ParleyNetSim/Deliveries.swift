/// When the copies of one packet arrive: none (lost or dropped), one, or two (duplicated).
///
/// A fixed-size value rather than an array, so the proxy's per-packet path allocates
/// nothing for it. Times are on the caller's time line (the one `sentAt` was given on).
public struct Deliveries: Sendable, Equatable, RandomAccessCollection {
    private var first: Int64 = 0
    private var second: Int64 = 0
    public private(set) var count = 0

    public init() {}

    mutating func append(nanoseconds time: Int64) {
        precondition(count < 2, "a packet has at most two copies")
        if count == 0 { first = time } else { second = time }
        count += 1
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { count }

    /// The arrival time of copy `index`.
    public subscript(index: Int) -> Duration { .nanoseconds(nanoseconds(at: index)) }

    /// The arrival time of copy `index`, in nanoseconds.
    public func nanoseconds(at index: Int) -> Int64 {
        precondition(index >= 0 && index < count, "copy \(index) of \(count)")
        return index == 0 ? first : second
    }

    public var isLost: Bool { count == 0 }
}
