/// A recurring delay spike: for `length` out of every `period`, packets take `extraDelay`
/// longer, the way a Wi-Fi scan, a cellular handover or a stalled VPS host looks.
///
/// The first spike starts one period after the flow's first packet, so a flow starts
/// clean: with `300ms/10s` and the default 1 s length, packets sent 10–11 s, 20–21 s, …
/// after the first one are held 300 ms more, and the path's delay is its own again for
/// the packet sent next. Without reordering, the packets sent in the 300 ms after a spike
/// would overtake those it still holds, so they queue behind the last of them and leave
/// with it, back to back (the link's line rate); with reordering they overtake.
public struct DelaySpike: Sendable, Equatable {
    public var extraDelay: Duration
    public var period: Duration
    public var length: Duration

    public static let defaultLength: Duration = .seconds(1)

    public init(extraDelay: Duration, every period: Duration, lasting length: Duration = DelaySpike.defaultLength) {
        self.extraDelay = extraDelay
        self.period = period
        self.length = length
    }

    /// The extra delay for a packet reaching the delay stage `elapsed` nanoseconds after the
    /// flow's first packet.
    func extraDelay(elapsed: Int64) -> Int64 {
        let period = self.period.nanoseconds
        guard period > 0, elapsed >= period else { return 0 }
        return elapsed % period < length.nanoseconds ? extraDelay.nanoseconds : 0
    }
}
