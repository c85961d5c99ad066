/// Decides the encoder's expected loss and bitrate from the loss the relay reports about
/// our stream (the fraction lost in its RTCP receiver reports, about one a second).
///
/// Opus's in-band FEC re-sends a coarse copy of each frame inside the next packet, so a
/// receiver can rebuild a lost frame; libopus spends bits on it only when told to expect
/// loss (`PACKET_LOSS_PERC`), and takes those bits from the voice itself. So:
///
/// - **Expected loss** follows the worst of the last `memory` reports (about 4 s), rounded
///   up to a whole percent, capped at `maximumExpectedLossPercent`: it rises with the first
///   bad report and falls only once every report in the memory is better, so a burst does
///   not make it hop up and down. A loss that clears entirely still leaves
///   `minimumExpectedLossPercent` of protection, because the first packets of the next burst
///   are lost before any report can say so.
/// - **Bitrate** steps with the expected loss, `--bitrate` being the ceiling: three quarters
///   of it on a clean path, seven eighths from `moderateLossPercent`, all of it from
///   `highLossPercent` — the headroom FEC needs so the voice itself does not get coarser.
///   Stepping down waits for the expected loss to fall `hysteresisPercent` below the step's
///   threshold.
///
/// Plain Swift with time passed in; the network loop feeds it and the capture thread
/// applies what it decides.
public struct EncoderAdaptation: Sendable, Equatable {
    public struct Configuration: Sendable, Equatable {
        /// The ceiling, bits per second (`--bitrate`).
        public var maximumBitrate = 32_000
        public var memory = 4
        public var minimumExpectedLossPercent = 2
        public var maximumExpectedLossPercent = 40
        public var moderateLossPercent = 3
        public var highLossPercent = 8
        public var hysteresisPercent = 2
        public init() {}
    }

    /// What the encoder should be set to.
    public struct Setting: Sendable, Equatable {
        public var bitrate: Int
        public var expectedLossPercent: Int
    }

    public let configuration: Configuration
    public private(set) var setting: Setting
    private var recent: [Double] = []
    private var step = 0  // 0 clean, 1 moderate, 2 high

    public init(_ configuration: Configuration = Configuration()) {
        self.configuration = configuration
        // Until the first report: the clean step, with the minimum protection.
        setting = Setting(bitrate: Self.bitrate(step: 0, ceiling: configuration.maximumBitrate),
                          expectedLossPercent: configuration.minimumExpectedLossPercent)
    }

    /// The worst loss fraction in memory (0–1), as last reported.
    public var smoothedLoss: Double { recent.max() ?? 0 }

    /// Takes one report's fraction lost (0–1). Returns the new setting when it changed.
    public mutating func report(lossFraction: Double) -> Setting? {
        recent.append(max(0, min(1, lossFraction)))
        if recent.count > configuration.memory { recent.removeFirst(recent.count - configuration.memory) }
        let measured = Int((smoothedLoss * 100).rounded(.up))
        let expected = min(configuration.maximumExpectedLossPercent, max(configuration.minimumExpectedLossPercent, measured))
        let wanted: Int
        if measured >= configuration.highLossPercent {
            wanted = 2
        } else if measured >= configuration.moderateLossPercent {
            wanted = 1
        } else {
            wanted = 0
        }
        if wanted > step {
            step = wanted
        } else if wanted < step {
            // Step down only well clear of the threshold that put us up there.
            let threshold = step == 2 ? configuration.highLossPercent : configuration.moderateLossPercent
            if measured <= threshold - configuration.hysteresisPercent { step = wanted }
        }
        let next = Setting(bitrate: Self.bitrate(step: step, ceiling: configuration.maximumBitrate), expectedLossPercent: expected)
        guard next != setting else { return nil }
        setting = next
        return next
    }

    private static func bitrate(step: Int, ceiling: Int) -> Int {
        let eighths = [6, 7, 8][step]
        // Opus takes 6 kb/s at the least.
        return max(6_000, ceiling * eighths / 8)
    }
}
