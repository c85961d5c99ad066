import Foundation
import ParleyWire

/// The RTP packets a call sent or received, one line each, for offline analysis: which
/// packets a listener got, when, and what they carried (`parley call --packet-trace`, a
/// diagnostic; `parley-bench replay` and `ideal-decoder` read it back).
///
/// A CSV file with a header line:
///
/// ```
/// direction,ssrc,sequence,timestamp,monotonic_ns,size,frame_start,payload_type,payload
/// sent,3405691582,17,960000,81234567890123,97,48000,111,78a1…
/// received,3405691582,17,960000,81234567912345,97,,111,78a1…
/// ```
///
/// - `direction`: `sent` (the capture thread handed it to the network) or `received` (it
///   came from the relay and opened; before the jitter buffer, so late and duplicate
///   packets are here too).
/// - `ssrc`, `sequence`, `timestamp`: the RTP header's fields, in decimal.
/// - `monotonic_ns`: CLOCK_MONOTONIC when it was sent or received, nanoseconds; the same
///   clock as `--stats-json`'s `captureStartedAtNanoseconds` and
///   `playbackStartedAtNanoseconds`, so traces and recordings share one timeline.
/// - `size`: the whole RTP packet's bytes (header and extension included).
/// - `frame_start`: for a sent packet, the index in the `--record-sent` recording of the
///   first sample its frame encodes; empty for a received one.
/// - `payload_type`: the RTP payload type: 111 Opus, 63 RED (RFC 2198: Opus frames, the
///   packet's own and copies of earlier ones; `IncomingFrames` unwraps them).
/// - `payload`: the RTP payload in lowercase hex.
public enum PacketTrace {
    public enum Direction: String, Sendable {
        case sent, received
    }

    public struct Entry: Sendable, Equatable {
        public var direction: Direction
        public var ssrc: UInt32
        public var sequenceNumber: UInt16
        public var timestamp: UInt32
        public var nanoseconds: UInt64
        public var size: Int
        public var frameStartSample: Int?
        public var payloadType: UInt8
        public var payload: [UInt8]

        public init(direction: Direction, ssrc: UInt32, sequenceNumber: UInt16, timestamp: UInt32, nanoseconds: UInt64,
                    size: Int, frameStartSample: Int? = nil, payloadType: UInt8 = RTPHeader.opusPayloadType, payload: [UInt8]) {
            self.direction = direction
            self.ssrc = ssrc
            self.sequenceNumber = sequenceNumber
            self.timestamp = timestamp
            self.nanoseconds = nanoseconds
            self.size = size
            self.frameStartSample = frameStartSample
            self.payloadType = payloadType
            self.payload = payload
        }
    }

    public struct ReadError: Error, CustomStringConvertible, Equatable {
        public var path: String?
        /// 1-based; 0 when the file as a whole is the problem.
        public var line: Int
        public var reason: String

        public var description: String {
            let place = [path, line > 0 ? "line \(line)" : nil].compactMap { $0 }.joined(separator: ", ")
            return place.isEmpty ? reason : "\(place): \(reason)"
        }
    }

    public static let header = "direction,ssrc,sequence,timestamp,monotonic_ns,size,frame_start,payload_type,payload"

    /// One entry as a line of the file, without the newline.
    public static func line(_ entry: Entry) -> String {
        var text = "\(entry.direction.rawValue),\(entry.ssrc),\(entry.sequenceNumber),\(entry.timestamp),\(entry.nanoseconds),\(entry.size),"
        if let frame = entry.frameStartSample { text += String(frame) }
        text += ",\(entry.payloadType),"
        text.reserveCapacity(text.utf8.count + 2 * entry.payload.count)
        let digits = Array("0123456789abcdef".utf8)
        text += String(decoding: entry.payload.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] }, as: UTF8.self)
        return text
    }

    /// Reads one line (without its newline). Any text gives an entry or a `ReadError`
    /// saying what is wrong with it.
    public static func parse(line text: Substring, number: Int = 0) throws(ReadError) -> Entry {
        func fail(_ reason: String) -> ReadError { ReadError(path: nil, line: number, reason: reason) }
        let fields = text.split(separator: ",", omittingEmptySubsequences: false)
        guard fields.count == 9 else {
            throw fail("expected 9 comma-separated fields (\(header)), found \(fields.count)")
        }
        guard let direction = Direction(rawValue: String(fields[0])) else {
            throw fail("direction '\(fields[0].prefix(20))' is neither sent nor received")
        }
        guard let ssrc = UInt32(fields[1]) else { throw fail("ssrc '\(fields[1].prefix(20))' is not a 32-bit number") }
        guard let sequence = UInt16(fields[2]) else { throw fail("sequence '\(fields[2].prefix(20))' is not a 16-bit number") }
        guard let timestamp = UInt32(fields[3]) else { throw fail("timestamp '\(fields[3].prefix(20))' is not a 32-bit number") }
        guard let nanoseconds = UInt64(fields[4]) else { throw fail("monotonic_ns '\(fields[4].prefix(20))' is not a number of nanoseconds") }
        guard let size = Int(fields[5]), size >= 0 else { throw fail("size '\(fields[5].prefix(20))' is not a byte count") }
        var frame: Int?
        if !fields[6].isEmpty {
            guard let value = Int(fields[6]), value >= 0 else { throw fail("frame_start '\(fields[6].prefix(20))' is not a sample index") }
            frame = value
        }
        guard let payloadType = UInt8(fields[7]), payloadType <= 0x7F else {
            throw fail("payload_type '\(fields[7].prefix(20))' is not an RTP payload type (0–127)")
        }
        guard let payload = bytes(hex: fields[8]) else { throw fail("payload is not an even number of hex digits") }
        return Entry(direction: direction, ssrc: ssrc, sequenceNumber: sequence, timestamp: timestamp, nanoseconds: nanoseconds,
                     size: size, frameStartSample: frame, payloadType: payloadType, payload: payload)
    }

    /// Every entry of a trace file, in file order.
    public static func read(contentsOf path: String) throws(ReadError) -> [Entry] {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw ReadError(path: path, line: 0, reason: "cannot read it (\(error.localizedDescription))")
        }
        return try parse(String(decoding: data, as: UTF8.self), path: path)
    }

    /// Every entry of a trace's text: the header first, then one entry a line (a blank last
    /// line is fine).
    public static func parse(_ text: String, path: String? = nil) throws(ReadError) -> [Entry] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let first = lines.first, first == Substring(header) else {
            throw ReadError(path: path, line: 1, reason: "not a packet trace: the first line should be '\(header)'")
        }
        var entries: [Entry] = []
        entries.reserveCapacity(lines.count)
        for (index, line) in lines.enumerated().dropFirst() where !line.isEmpty {
            do {
                entries.append(try parse(line: line, number: index + 1))
            } catch {
                throw ReadError(path: path, line: error.line, reason: error.reason)
            }
        }
        return entries
    }

    private static func bytes(hex: Substring) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return digit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return digit - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return digit - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }
}
