/// Decides how the sender spends its bits, from the loss reported on the path to its
/// listeners (the fraction lost of each RTCP report about our stream, about one a second).
///
/// - **A clean path gets the whole `--bitrate` for the voice and nothing else.** Opus's
///   in-band FEC takes its bits from the voice itself (the same 32 kb/s scores 4.42
///   PESQ-WB without FEC and 4.12 with FEC for 10 % loss), so it is off until a report
///   shows loss.
/// - **RED redundancy** (RFC 2198: exact copies of the frames `redundancy.distances` back
///   in each packet, 1 and 3) is on from the first report of loss until the reports have
///   covered `redundancyHoldPackets` of our packets (30 s of speech) without one lost, and
///   only while every listener can read it. It rebuilds every burst of up to three lost
///   packets whole, which FEC (one frame back) cannot. While it is on, FEC is off: the
///   copies do its work at full quality, and FEC's bits would come from the voice. It costs
///   bandwidth, not voice quality, so it stays on long after the loss: the first packets of
///   the next burst are lost before any report can say so.
/// - **Clean evidence is counted in packets, not reports.** A silent talker sends a DTX
///   packet every 400 ms, so its reports cover two or three packets each and say "no loss"
///   on a path that loses one in ten; counted as reports, ten seconds of silence ended the
///   copies just before the talker's next words (the demo's wifi-bad network: a turn's
///   first second lost 12 frames that copies would have rebuilt).
/// - **Until the path is known, copies are sent.** A call's first words leave before anyone
///   can say whether the path loses them: the first report comes 1–2 s after the first
///   packet, and on wifi-bad a burst in that time cost the first turn 13–24 frames that no
///   receiver could rebuild (with copies, 0–8). Copies stay until reports have covered
///   `unknownPathPackets` (5 s of speech) without a loss.
/// - **In-band FEC** protects instead while a listener cannot read RED (an older client):
///   on while any of the last `memory` reports showed loss, for the worst of them (rounded
///   up to a whole percent, at most `maximumExpectedLossPercent`).
///
/// `--bitrate` is the voice's ceiling: the copies add to it (about 3× while on).
/// BENCHMARKS.md ("Sender protection") has the measurements these choices come from.
///
/// Plain Swift with no clock (reports are its time); the network loop feeds it and the
/// capture thread applies what it decides.
public struct EncoderAdaptation: Sendable, Equatable {
    public struct Configuration: Sendable, Equatable {
        /// The voice's bitrate, bits per second (`--bitrate`).
        public var maximumBitrate = 32_000
        /// Reports the FEC setting remembers.
        public var memory = 4
        public var maximumExpectedLossPercent = 40
        /// What redundancy sends while on.
        public var redundancy = Redundancy(distances: [1, 3])
        /// Our packets reported without a loss, after a loss, before redundancy stops (30 s
        /// of speech; a silent talker's DTX packets count for what they are, a few a second).
        public var redundancyHoldPackets = 1_500
        /// The same before any loss was reported: the path is unknown until this many of our
        /// packets were reported without one lost (5 s of speech).
        public var unknownPathPackets = 250
        public init() {}
    }

    /// What the encoder should be set to.
    public struct Setting: Sendable, Equatable {
        /// The voice's bitrate: the Opus encoding of the current frame, in-band FEC included.
        public var bitrate: Int
        /// The loss in-band FEC protects against, 0–100 %; 0 turns FEC off.
        public var expectedLossPercent: Int
        public var redundancy: Redundancy

        public init(bitrate: Int, expectedLossPercent: Int, redundancy: Redundancy = .none) {
            self.bitrate = bitrate
            self.expectedLossPercent = expectedLossPercent
            self.redundancy = redundancy
        }
    }

    /// RFC 2198 redundancy: earlier frames again in later packets (see `VoiceEncoder`).
    public struct Redundancy: Sendable, Equatable {
        /// How many frames back each redundant block reaches (1: the previous frame).
        public var distances: [Int]
        /// nil: exact copies of the earlier frames' Opus packets; otherwise a second
        /// encoding of every frame at this bitrate.
        public var bitrate: Int?

        public init(distances: [Int], bitrate: Int? = nil) {
            self.distances = distances
            self.bitrate = bitrate
        }

        public static let none = Redundancy(distances: [])
        public var isOn: Bool { !distances.isEmpty }
    }

    public let configuration: Configuration
    public private(set) var setting: Setting
    private var recent: [Double] = []
    /// Our packets reported without a loss since the last report that showed one (or since
    /// the call began), and whether any report showed loss.
    private var cleanPackets = 0
    private var lossReported = false
    private var listenersReadRedundancy = false

    public init(_ configuration: Configuration = Configuration()) {
        self.configuration = configuration
        setting = Setting(bitrate: configuration.maximumBitrate, expectedLossPercent: 0)
    }

    /// The worst loss fraction in memory (0–1), as last reported.
    public var smoothedLoss: Double { recent.max() ?? 0 }

    /// Takes one report's fraction lost (0–1) on the path to our listeners, and how many of
    /// our packets it covers (those sent since the previous report). Returns the new setting
    /// when it changed.
    public mutating func report(lossFraction: Double, packets: Int) -> Setting? {
        let loss = lossFraction.isFinite ? max(0, min(1, lossFraction)) : 0
        recent.append(loss)
        if recent.count > configuration.memory { recent.removeFirst(recent.count - configuration.memory) }
        if loss > 0 {
            cleanPackets = 0
            lossReported = true
        } else {
            // Saturating: a count far past the hold changes nothing.
            cleanPackets = min(cleanPackets + max(0, min(packets, 1 << 20)), 1 << 30)
        }
        return decide()
    }

    /// Takes whether every listener in the room can read RED (the roster's capabilities).
    /// Returns the new setting when it changed.
    public mutating func listeners(allReadRedundancy: Bool) -> Setting? {
        listenersReadRedundancy = allReadRedundancy
        return decide()
    }

    private mutating func decide() -> Setting? {
        let hold = lossReported ? configuration.redundancyHoldPackets : configuration.unknownPathPackets
        let redundant = listenersReadRedundancy && cleanPackets < hold
        // Copies rebuild a lost frame whole; FEC's coarse copy would only take bits from the voice.
        let measured = redundant ? 0 : Int((smoothedLoss * 100).rounded(.up))
        let next = Setting(
            bitrate: configuration.maximumBitrate,
            expectedLossPercent: min(configuration.maximumExpectedLossPercent, measured),
            redundancy: redundant ? configuration.redundancy : .none)
        guard next != setting else { return nil }
        setting = next
        return next
    }
}
