/// A sliding anti-replay window over 64-bit packet counters, in the style of RFC 3711
/// §3.3.2 and the bitmap layout of RFC 6479: a ring of 64-bit words, so advancing the
/// window clears whole words instead of shifting bits.
///
/// Use it in two steps: ``mayAccept(_:)`` before decrypting (cheap, rejects replays and
/// stale packets without spending an AEAD operation), ``record(_:)`` only after the
/// packet authenticated — so forged packets can never move the window.
public struct ReplayWindow: Sendable {
    /// Bits in the ring. Packets up to `size - 64` behind the highest counter seen are
    /// still accepted once each (RFC 6479 keeps one word as slack for the ring).
    public static let size = 1024
    private static let wordCount = size / 64

    private var words = [UInt64](repeating: 0, count: wordCount)
    private var highest: UInt64 = 0
    private var isEmpty = true

    public init() {}

    /// How far behind the highest counter a packet may be and still be accepted.
    public static var tolerance: UInt64 { UInt64(size - 64) }

    public func mayAccept(_ counter: UInt64) -> Bool {
        if isEmpty || counter > highest { return true }
        if highest - counter >= Self.tolerance { return false }
        let (word, bit) = Self.position(counter)
        return words[word] & bit == 0
    }

    /// Marks `counter` as received; call only for an authenticated packet that passed ``mayAccept(_:)``.
    public mutating func record(_ counter: UInt64) {
        if isEmpty || counter > highest {
            let oldWord = isEmpty ? (counter >> 6) &- 1 : highest >> 6
            let newWord = counter >> 6
            // Clear the words the window slides over (at most the whole ring).
            let steps = isEmpty ? UInt64(Self.wordCount) : min(newWord - oldWord, UInt64(Self.wordCount))
            var index = oldWord
            for _ in 0..<steps {
                index &+= 1
                words[Int(index % UInt64(Self.wordCount))] = 0
            }
            highest = counter
            isEmpty = false
        }
        let (word, bit) = Self.position(counter)
        words[word] |= bit
    }

    /// The highest authenticated counter, or nil before the first packet.
    public var highestCounter: UInt64? { isEmpty ? nil : highest }

    private static func position(_ counter: UInt64) -> (Int, UInt64) {
        (Int((counter >> 6) % UInt64(wordCount)), 1 << (counter & 63))
    }
}
