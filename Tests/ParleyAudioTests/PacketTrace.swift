import Foundation
import ParleyAudio

/// An encoded stream and the times its packets reach the receiver: the input of the
/// jitter buffer tests.
struct EncodedStream {
    var packets: [[UInt8]]
    /// The signal that was encoded (for comparisons).
    var source: [Float]
    let frameSamples = 960

    /// Encodes `signal` in 20 ms frames.
    init(_ signal: [Float], bitrate: Int = 32_000, fec: Bool = true, complexity: Int = 5) throws {
        var configuration = OpusEncoder.Configuration()
        configuration.bitrate = bitrate
        configuration.inbandFEC = fec
        configuration.expectedLossPercent = fec ? 20 : 0
        configuration.complexity = complexity
        let encoder = try OpusEncoder(configuration)
        source = signal
        packets = []
        let frames = signal.count / 960
        packets.reserveCapacity(frames)
        for index in 0..<frames {
            packets.append(try encoder.encode(Array(signal[index * 960..<(index + 1) * 960])))
        }
    }
}

/// One packet on the wire: which one, when it arrives.
struct Arrival {
    var index: Int
    var time: Double
    /// When the receiver hands the packet to the buffer, if later than it arrived (held for
    /// its key in an end-to-end encrypted room); it is still filed with its arrival time.
    var filedAt: Double?

    init(index: Int, time: Double, filedAt: Double? = nil) {
        self.index = index
        self.time = time
        self.filedAt = filedAt
    }

    var filingTime: Double { filedAt ?? time }
}

/// Builds arrival traces: the sender emits packet k at k × 20 ms on its own clock, which
/// runs `1 + driftPPM·10⁻⁶` times as fast as the receiver's; each packet then takes a
/// network delay; some are lost, some duplicated.
struct TraceBuilder {
    var count: Int
    var driftPPM: Double = 0
    var baseDelay: Double = 0.030
    var delay: (Int) -> Double = { _ in 0 }
    var lost: Set<Int> = []
    var duplicated: Set<Int> = []
    var extraDelay: [Int: Double] = [:]
    /// A path that keeps order (a queue): a packet held up holds up those behind it, which
    /// then arrive together when it is let through, as behind a stalled Wi-Fi link.
    var keepsOrder = false

    func build() -> [Arrival] {
        var arrivals = [Arrival]()
        var previous = -Double.infinity
        for index in 0..<count where !lost.contains(index) {
            let sent = Double(index) * 0.020 / (1 + driftPPM * 1e-6)
            var time = sent + baseDelay + delay(index) + (extraDelay[index] ?? 0)
            if keepsOrder {
                time = max(time, previous)
                previous = time
            }
            arrivals.append(Arrival(index: index, time: time))
            if duplicated.contains(index) { arrivals.append(Arrival(index: index, time: time + 0.003)) }
        }
        return arrivals.sorted { $0.time < $1.time }
    }
}

/// Plays a trace through a jitter buffer as a receiver would: packets inserted when they
/// arrive, one 10 ms chunk read every 10 ms of receiver time.
enum JitterBufferSimulation {
    static let chunk = 480

    /// Runs for `duration` seconds; `observe` sees each chunk, the time and the statistics.
    static func run(
        stream: EncodedStream, arrivals: [Arrival], buffer: JitterBuffer, duration: Double,
        observe: (UnsafeBufferPointer<Float>, Double, JitterBufferStatistics) -> Void
    ) {
        var output = [Float](repeating: 0, count: chunk)
        var next = 0
        let reads = Int(duration / 0.010)
        for read in 0..<reads {
            let now = Double(read) * 0.010
            while next < arrivals.count, arrivals[next].filingTime <= now {
                let arrival = arrivals[next]
                let sequence = UInt16(truncatingIfNeeded: arrival.index &+ 40_000)  // crosses the 16-bit wrap
                let timestamp = UInt32(truncatingIfNeeded: arrival.index &* 960 &+ 4_000_000_000)
                buffer.insert(payload: stream.packets[arrival.index], sequenceNumber: sequence, timestamp: timestamp, arrival: arrival.time)
                next += 1
            }
            output.withUnsafeMutableBufferPointer { _ = buffer.read(into: $0, now: now) }
            output.withUnsafeBufferPointer { observe($0, now, buffer.currentStatistics) }
        }
    }

    /// Runs and returns the whole output.
    static func output(stream: EncodedStream, arrivals: [Arrival], buffer: JitterBuffer, duration: Double) -> [Float] {
        var result = [Float]()
        result.reserveCapacity(Int(duration * 48_000))
        run(stream: stream, arrivals: arrivals, buffer: buffer, duration: duration) { chunk, _, _ in result.append(contentsOf: chunk) }
        return result
    }
}

/// A deterministic pseudo-random value in 0..<1 for packet `index` (so traces need no state).
func unitNoise(_ index: Int, seed: UInt64) -> Double {
    var generator = SeededGenerator(seed: seed &+ UInt64(index) &* 0x9E37_79B9)
    return Double.random(in: 0..<1, using: &generator)
}
