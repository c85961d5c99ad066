/// The frame durations Parley sends. 20 ms is the default (RFC 7587's recommendation for
/// voice); 10 ms trades bitrate for latency, 40 and 60 ms trade latency for bitrate.
public enum OpusFrameDuration: Int, CaseIterable, Sendable, CustomStringConvertible {
    case ms10 = 10
    case ms20 = 20
    case ms40 = 40
    case ms60 = 60

    public init?(milliseconds: Int) { self.init(rawValue: milliseconds) }

    public var milliseconds: Int { rawValue }
    /// Samples per channel at 48 kHz.
    public var samples: Int { AudioClock.samples(milliseconds: rawValue) }
    public var description: String { "\(rawValue) ms" }
}
