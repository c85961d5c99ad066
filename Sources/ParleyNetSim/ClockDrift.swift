/// Clock drift between sender and receiver, in parts per million.
///
/// A receiver whose clock runs `ppm` fast reads every interval as `1 + ppm / 10⁶` times
/// what the sender's clock measured: at +300 ppm, 20 ms frames arrive 20.006 ms apart and
/// a jitter buffer slowly runs dry; at −300 ppm they arrive 19.994 ms apart and it slowly
/// fills. Drift scales delivery times about the flow's first packet, so after a minute at
/// ±300 ppm packets arrive 18 ms later or earlier than the delay alone would make them.
///
/// In virtual time (the models used in-process) any drift works. The proxy cannot deliver a
/// packet before it arrives, so negative drift eats into the configured delay: give a flow
/// at least `|ppm| × 10⁻⁶ × duration` of delay (18 ms per minute at −300 ppm); past that,
/// packets go out as soon as they arrive and the drift stops growing.
public struct ClockDrift: Sendable, Equatable {
    public let partsPerMillion: Double
    private let scale: Double

    public init(partsPerMillion: Double) {
        self.partsPerMillion = partsPerMillion
        scale = 1 + partsPerMillion / 1_000_000
    }

    /// The receiver's reading of instant `time` (nanoseconds), both clocks agreeing at `epoch`.
    public func receiverTime(_ time: Int64, epoch: Int64) -> Int64 {
        epoch &+ Int64((Double(time &- epoch) * scale).rounded())
    }
}
