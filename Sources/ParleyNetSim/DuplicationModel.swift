/// Duplicates packets, as Wi-Fi link-layer retransmissions and some routing faults do: each
/// packet, independently with probability `rate`, is sent twice. The copy travels the rest
/// of the path on its own (its own queueing and delay), so it may arrive well after the
/// original, or, with reordering, before it.
public struct DuplicationModel: Sendable {
    public let rate: Double
    private var random: SeededRandom
    public private(set) var report = DuplicationReport()

    public init(rate: Double, seed: UInt64) {
        precondition((0...1).contains(rate), "duplication rate \(rate) outside 0...1; validate with Impairment.validate()")
        self.rate = rate
        random = SeededRandom(seed: seed)
    }

    /// Whether the next packet gets a second copy.
    public mutating func duplicatesNextPacket() -> Bool {
        let duplicated = random.nextBernoulli(rate)
        report.packets += 1
        if duplicated { report.duplicated += 1 }
        return duplicated
    }
}

public struct DuplicationReport: Sendable, Equatable {
    public internal(set) var packets = 0
    /// Packets that got an extra copy.
    public internal(set) var duplicated = 0

    public init() {}

    public var duplicationRate: Double { packets == 0 ? 0 : Double(duplicated) / Double(packets) }

    public mutating func merge(_ other: DuplicationReport) {
        packets += other.packets
        duplicated += other.duplicated
    }
}
