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
