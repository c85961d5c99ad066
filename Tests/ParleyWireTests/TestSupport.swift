import ParleyBasics
import ParleyWire

/// Seeded, so property tests are reproducible: a failure message names the seed and the
/// case that failed.
typealias SeededGenerator = SplitMix64

extension SplitMix64 {
    mutating func bytes(count: Int) -> [UInt8] {
        (0..<count).map { _ in UInt8.random(in: 0...255, using: &self) }
    }
}

/// Builds a byte array from hex text written as it appears in the RFC diagrams; spaces ignored.
func hex(_ text: String) -> [UInt8] {
    let digits = text.filter { !$0.isWhitespace }
    precondition(digits.count % 2 == 0, "odd number of hex digits")
    var bytes: [UInt8] = []
    var index = digits.startIndex
    while index < digits.endIndex {
        let next = digits.index(index, offsetBy: 2)
        bytes.append(UInt8(digits[index..<next], radix: 16)!)
        index = next
    }
    return bytes
}

func parseRTP(_ bytes: [UInt8]) throws(WireError) -> (header: RTPHeader, payload: [UInt8], padding: Int) {
    var result: Result<(RTPHeader, [UInt8], Int), WireError>!
    bytes.withUnsafeBytes { raw in
        do throws(WireError) {
            let view = try RTPPacketView(parsing: raw)
            result = .success((RTPHeader(view), Array(view.payload), view.paddingCount))
        } catch {
            result = .failure(error)
        }
    }
    return try result.get()
}
