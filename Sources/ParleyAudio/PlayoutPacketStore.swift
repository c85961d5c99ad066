/// The packets waiting to play, in fixed slots indexed by extended sequence number, so
/// that taking one out on the playback thread neither allocates nor frees memory, and a
/// flood of packets cannot grow it.
///
/// A slot holds up to `maximumPayload` bytes: any Opus packet that fits in one Ethernet
/// frame. The store spans `capacity` consecutive sequence numbers from `base` (the next
/// to play); a packet beyond that span pushes the oldest out (the caller counts them).
struct PlayoutPacketStore {
    static let maximumPayload = 1_500

    struct Packet {
        var sequence: Int64
        var timestamp: Int64
        /// Samples per channel the packet decodes to.
        var samples: Int
        var length: Int
        /// Whether the packet carries in-band FEC for the one before it.
        var carriesFEC: Bool
        /// A redundant copy of the frame (RFC 2198) rather than its own packet.
        var isRedundant: Bool
    }

    let capacity: Int
    private var slots: [Packet?]
    private var bytes: [UInt8]
    /// The lowest sequence number the store may hold (the next to play, once playing).
    private(set) var base: Int64 = 0
    private(set) var count = 0
    /// The highest sequence number stored, if any.
    private(set) var highest: Int64?

    init(capacity: Int) {
        self.capacity = capacity
        slots = [Packet?](repeating: nil, count: capacity)
        bytes = [UInt8](repeating: 0, count: capacity * Self.maximumPayload)
    }

    private func slot(_ sequence: Int64) -> Int { Int(sequence & Int64(capacity - 1)) }

    /// The packet stored under `sequence`, if any.
    func packet(_ sequence: Int64) -> Packet? {
        guard sequence >= base, let packet = slots[slot(sequence)], packet.sequence == sequence else { return nil }
        return packet
    }

    func contains(_ sequence: Int64) -> Bool { packet(sequence) != nil }

    /// Stores a packet; returns how many older packets it pushed out to fit the span. A
    /// packet below `base` is not stored (returns nil).
    mutating func store(
        _ payload: UnsafeRawBufferPointer, sequence: Int64, timestamp: Int64, samples: Int, carriesFEC: Bool, isRedundant: Bool
    ) -> Int? {
        guard sequence >= base, payload.count <= Self.maximumPayload else { return nil }
        var evicted = 0
        if sequence >= base + Int64(capacity) {
            let newBase = sequence - Int64(capacity) + 1
            evicted = advance(to: newBase)
        }
        let index = slot(sequence)
        if slots[index] == nil { count += 1 }
        slots[index] = Packet(sequence: sequence, timestamp: timestamp, samples: samples, length: payload.count, carriesFEC: carriesFEC, isRedundant: isRedundant)
        bytes.withUnsafeMutableBytes { storage in
            let start = index * Self.maximumPayload
            UnsafeMutableRawBufferPointer(rebasing: storage[start..<start + payload.count]).copyMemory(from: payload)
        }
        highest = max(highest ?? sequence, sequence)
        return evicted
    }

    /// Calls `body` with the stored payload of `sequence` (which must be stored).
    func withPayload<Result>(_ sequence: Int64, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        let packet = slots[slot(sequence)]!
        let start = slot(sequence) * Self.maximumPayload
        return bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[start..<start + packet.length])) }
    }

    /// The first stored sequence number after `sequence`, if any.
    func firstStored(after sequence: Int64) -> Int64? {
        guard let highest, highest > sequence else { return nil }
        var candidate = max(sequence + 1, base)
        while candidate <= highest {
            if contains(candidate) { return candidate }
            candidate += 1
        }
        return nil
    }

    /// Drops every packet below `newBase` and makes it the base; returns how many were dropped.
    @discardableResult
    mutating func advance(to newBase: Int64) -> Int {
        guard newBase > base else { return 0 }
        var dropped = 0
        if count > 0 {
            var sequence = base
            let end = min(newBase, base + Int64(capacity))
            while sequence < end, count > 0 {
                let index = slot(sequence)
                if let packet = slots[index], packet.sequence == sequence {
                    slots[index] = nil
                    count -= 1
                    dropped += 1
                }
                sequence += 1
            }
        }
        base = newBase
        if count == 0 { highest = nil }
        return dropped
    }

    /// Moves the base to `newBase`: down (an earlier packet came before playing began;
    /// the caller checks that the span still holds everything stored) or up.
    mutating func rebase(to newBase: Int64) {
        if newBase > base {
            advance(to: newBase)
        } else {
            base = newBase
        }
    }

    /// Empties the store and sets a new base.
    mutating func removeAll(base newBase: Int64) {
        for index in 0..<capacity { slots[index] = nil }
        count = 0
        highest = nil
        base = newBase
    }
}
