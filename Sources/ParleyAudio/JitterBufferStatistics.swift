/// What a jitter buffer reports for the status line and metrics.
public struct JitterBufferStatistics: Sendable, Equatable {
    /// The delay the buffer aims for, ms: a high quantile of recent arrival delay, clamped.
    public var targetDelayMilliseconds: Double = 0
    /// The delay it plays at now, ms: how long after the earliest possible arrival the
    /// sample now playing was scheduled.
    public var currentDelayMilliseconds: Double = 0
    /// Playback speed: above 1 to shrink the delay, below 1 to grow it.
    public var playbackRate: Double = 1
    /// Packets accepted.
    public var received = 0
    /// Frames decoded from their own packet.
    public var decodedFrames = 0
    /// Lost frames rebuilt from the next packet's in-band FEC.
    public var fecRecovered = 0
    /// Lost frames played from a redundant copy in a later packet (RFC 2198 RED).
    public var redundancyRecovered = 0
    /// Lost frames concealed (PLC), not counting comfort noise in DTX.
    public var concealedFrames = 0
    /// Samples of concealment played while waiting for late audio (the buffer ran dry).
    public var underrunSamples = 0
    /// Times the buffer ran dry (a dry spell that turns out to be the sender's DTX silence
    /// is not counted).
    public var underruns = 0
    /// Of `underrunSamples`, those of a dry spell still going on: the next packet will tell
    /// whether the sender was silent (DTX) or its audio late. A stream that simply ends
    /// (the sender left) leaves its last dry spell here.
    public var unresolvedUnderrunSamples = 0
    /// Samples of comfort noise played during the sender's DTX silences.
    public var comfortNoiseSamples = 0
    /// Packets that arrived after their time had passed (dropped).
    public var late = 0
    /// Packets received twice (dropped).
    public var duplicates = 0
    /// Packets that were not valid Opus (dropped).
    public var invalid = 0
    /// Packets dropped because the buffer was full.
    public var overflowed = 0
    /// Times the stream restarted (a jump in sequence numbers).
    public var restarts = 0
}
