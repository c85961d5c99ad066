/// What a receiver knows about one incoming RTP stream, kept as RFC 3550 Appendix A says:
/// source validation and sequence tracking (A.1), loss (A.3) and interarrival jitter (A.8).
/// It produces the report block that goes back to the sender in an RR or SR.
///
/// Both the relay (per incoming leg) and the client (per remote speaker) keep one per SSRC.
/// Times are passed in, never read from a clock, so the logic is testable.
public struct RTPReceptionStatistics: Sendable {
    /// A.1: a jump larger than this is a restart or a bad packet, not loss.
    public static let maxDropout: UInt16 = 3000
    /// A.1: packets this far behind are late duplicates or a restart.
    public static let maxMisorder: UInt16 = 100
    /// A.1: sequential packets needed before a new source counts as valid.
    public static let minSequential = 2

    public let ssrc: UInt32
    /// RTP clock rate in Hz (48000 for Opus).
    public let clockRate: Int

    // A.1 state, named as in the RFC. `cycles` is 64 bits wide (the RFC's is 32): a sender can
    // add a cycle every 22 packets, and a 32-bit count would wrap within hours of such a stream.
    private var maxSequence: UInt16
    private var cycles: UInt64 = 0
    private var baseSequence: UInt32
    private var badSequence: UInt32
    private var probation: Int
    public private(set) var received: UInt64 = 0
    private var expectedPrior: UInt64 = 0
    private var receivedPrior: UInt64 = 0

    // A.8 state.
    private var transit: Int64?
    /// Interarrival jitter, in RTP timestamp units, scaled by 16 as A.8 recommends.
    private var jitterQ4: Int64 = 0

    // For the LSR/DLSR fields of the next report block.
    private var lastSenderReport: UInt32 = 0
    private var lastSenderReportArrivalNanoseconds: UInt64?

    /// What ``record(sequence:rtpTimestamp:arrivalNanoseconds:)`` decided about a packet.
    public enum Disposition: Sendable, Hashable {
        /// Counted; in order, or a tolerable reordering or gap.
        case accepted
        /// The source is not yet valid (A.1 probation); the packet is not counted.
        case probation
        /// A very large jump; counted only if the next packet confirms it (a restart).
        case badSequence
    }

    public init(ssrc: UInt32, clockRate: Int, firstSequence: UInt16) {
        self.ssrc = ssrc
        self.clockRate = clockRate
        self.maxSequence = firstSequence &- 1
        self.baseSequence = UInt32(firstSequence)
        self.badSequence = UInt32(UInt16.max) + 2  // cannot equal any seq + 1
        self.probation = Self.minSequential
    }

    /// Records one received packet. `arrivalNanoseconds` is any monotonic clock.
    @discardableResult
    public mutating func record(sequence: UInt16, rtpTimestamp: UInt32, arrivalNanoseconds: UInt64) -> Disposition {
        let disposition = updateSequence(sequence)
        if disposition == .accepted {
            updateJitter(rtpTimestamp: rtpTimestamp, arrivalNanoseconds: arrivalNanoseconds)
        }
        return disposition
    }

    /// Remembers an SR from this source so the next report block can echo it (LSR, DLSR).
    public mutating func recordSenderReport(_ ntp: NTPTimestamp, arrivalNanoseconds: UInt64) {
        lastSenderReport = ntp.middle32
        lastSenderReportArrivalNanoseconds = arrivalNanoseconds
    }

    /// A.1 `update_seq`.
    private mutating func updateSequence(_ sequence: UInt16) -> Disposition {
        let delta = sequence &- maxSequence
        if probation > 0 {
            // The source is valid only after minSequential packets in sequence.
            if sequence == maxSequence &+ 1 {
                probation -= 1
                maxSequence = sequence
                if probation == 0 {
                    initSequence(sequence)
                    received += 1
                    return .accepted
                }
            } else {
                probation = Self.minSequential - 1
                maxSequence = sequence
            }
            return .probation
        } else if delta < Self.maxDropout {
            // In order, with a permissible gap.
            if sequence < maxSequence { cycles &+= 1 << 16 }  // wraps after 2^48 cycles, never in practice
            maxSequence = sequence
        } else if UInt32(delta) <= 65_536 - UInt32(Self.maxMisorder) {
            // A very large jump.
            if UInt32(sequence) == badSequence {
                // Two sequential packets: the other side restarted without telling us.
                initSequence(sequence)
            } else {
                badSequence = UInt32(sequence &+ 1)
                return .badSequence
            }
        } else {
            // A duplicate or reordered packet: counted, max unchanged.
        }
        received += 1
        return .accepted
    }

    /// A.1 `init_seq`.
    private mutating func initSequence(_ sequence: UInt16) {
        baseSequence = UInt32(sequence)
        maxSequence = sequence
        badSequence = UInt32(UInt16.max) + 2
        cycles = 0
        received = 0
        receivedPrior = 0
        expectedPrior = 0
        transit = nil
    }

    /// A.8: J += (|D| - J) / 16, in timestamp units, with D the change in relative transit time.
    private mutating func updateJitter(rtpTimestamp: UInt32, arrivalNanoseconds: UInt64) {
        // Arrival in RTP units, whole seconds and the rest apart so nothing overflows however
        // long the clock has run; only its low 32 bits matter, as with the RTP timestamp.
        let rate = UInt64(clockRate)
        let arrivalUnits = (arrivalNanoseconds / 1_000_000_000) &* rate &+ (arrivalNanoseconds % 1_000_000_000) * rate / 1_000_000_000
        let arrival = Int64(truncatingIfNeeded: arrivalUnits)
        let newTransit = Int64(Int32(truncatingIfNeeded: arrival &- Int64(rtpTimestamp)))
        if let transit {
            var d = Int64(Int32(truncatingIfNeeded: newTransit &- transit))
            if d < 0 { d = -d }
            jitterQ4 += d - ((jitterQ4 + 8) >> 4)
        }
        transit = newTransit
    }

    /// The extended highest sequence number received (A.3 `extended_max`), in the 32 bits a
    /// report block carries.
    public var extendedHighestSequence: UInt32 { UInt32(truncatingIfNeeded: extendedMaximum) }

    private var extendedMaximum: UInt64 { cycles &+ UInt64(maxSequence) }

    /// Packets expected since the source became valid (A.3).
    public var expected: UInt64 {
        guard probation == 0, extendedMaximum >= UInt64(baseSequence) else { return 0 }
        return extendedMaximum - UInt64(baseSequence) + 1
    }

    /// Packets lost since the source became valid; negative when duplicates arrived.
    public var cumulativeLost: Int64 { Int64(clamping: expected) - Int64(clamping: received) }

    /// Interarrival jitter in RTP timestamp units.
    public var jitter: UInt32 { UInt32(clamping: jitterQ4 >> 4) }

    /// Interarrival jitter in seconds.
    public var jitterSeconds: Double { Double(jitterQ4) / 16 / Double(clockRate) }

    /// Whether the source has passed probation.
    public var isValid: Bool { probation == 0 }

    /// Builds the report block for this source and starts a new reporting interval (A.3).
    public mutating func makeReportBlock(nowNanoseconds: UInt64) -> RTCPReportBlock {
        let expected = self.expected
        let expectedInterval = expected > expectedPrior ? expected - expectedPrior : 0
        let receivedInterval = received > receivedPrior ? received - receivedPrior : 0
        expectedPrior = expected
        receivedPrior = received
        let fraction: UInt8
        if receivedInterval >= expectedInterval {
            fraction = 0
        } else {
            // At most 255/256, however the counts compare.
            fraction = UInt8(min(255, Double(expectedInterval - receivedInterval) / Double(expectedInterval) * 256))
        }
        var delay: UInt32 = 0
        if let arrival = lastSenderReportArrivalNanoseconds, nowNanoseconds >= arrival {
            // DLSR is in units of 1/65536 s, and at most 2^32 of them (18 hours) fit its field.
            let elapsed = min(nowNanoseconds - arrival, 65_536 * 1_000_000_000)
            delay = UInt32(clamping: elapsed * 65_536 / 1_000_000_000)
        }
        return RTCPReportBlock(
            ssrc: ssrc,
            fractionLost: fraction,
            cumulativeLost: Int32(clamping: cumulativeLost),
            extendedHighestSequence: extendedHighestSequence,
            jitter: jitter,
            lastSenderReport: lastSenderReport,
            delaySinceLastSenderReport: delay
        )
    }
}
