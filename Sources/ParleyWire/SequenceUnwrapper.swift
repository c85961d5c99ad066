/// Turns a wrapping RTP counter (16-bit sequence number, 32-bit timestamp) into a
/// 64-bit extended value that keeps counting across wrap-arounds (RFC 3550 §6.4.1, A.1).
///
/// Each value is placed at the extension nearest the highest value seen so far,
/// so a packet reordered back across a wrap (65535 arriving after 0) gets an
/// extended value just below, not 65536 above. Values can be negative when the very
/// first packet seen was not the earliest.
public struct WrappingCounterUnwrapper<Counter: FixedWidthInteger & UnsignedInteger>: Sendable {
    private var highest: Int64?

    public init() {}

    /// The highest extended value returned so far.
    public var highestExtended: Int64? { highest }

    public mutating func unwrap(_ value: Counter) -> Int64 {
        guard let highest else {
            self.highest = Int64(value)
            return Int64(value)
        }
        let extended = Self.extend(value, near: highest)
        if extended > highest { self.highest = extended }
        return extended
    }

    /// The extended value of `value` nearest to `reference`, without updating any state.
    public static func extend(_ value: Counter, near reference: Int64) -> Int64 {
        let modulus = Int64(1) << Counter.bitWidth
        let referenceLow = Counter(truncatingIfNeeded: reference)
        // The signed difference, interpreted in the counter's width.
        var delta = Int64(value &- referenceLow)
        if delta >= modulus / 2 { delta -= modulus }
        return reference + delta
    }
}

public typealias SequenceNumberUnwrapper = WrappingCounterUnwrapper<UInt16>
public typealias RTPTimestampUnwrapper = WrappingCounterUnwrapper<UInt32>
