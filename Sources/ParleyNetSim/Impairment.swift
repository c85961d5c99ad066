/// Everything done to one direction of a flow: the parameters of each model, as a value.
///
/// The fields mirror `parley netsim`'s flags one for one, so a scenario's values can be
/// overridden field by field (``Scenario``), and an ``ImpairmentPipeline`` builds the models
/// from them. The default value impairs nothing.
public struct Impairment: Sendable, Equatable {
    /// Fraction of packets lost, 0...1.
    public var loss: Double = 0
    /// Mean length of a run of lost packets; nil for independent loss (see ``LossModel``).
    public var lossBurst: Double? = nil
    /// Mean one-way delay the path adds (spikes and a trace add to it).
    public var delay: Duration = .zero
    /// Standard deviation of the one-way delay the path adds (spikes and a trace add to it),
    /// as a receiver measures it over the packets delivered, whatever the distribution and
    /// whether or not packets may overtake each other.
    public var jitter: Duration = .zero
    public var jitterDistribution: JitterDistribution = .normal
    /// Whether packets may overtake each other (see ``DelayModel``).
    public var reorder = false
    public var spike: DelaySpike? = nil
    /// Fraction of packets sent twice, 0...1.
    public var duplicate: Double = 0
    /// Bottleneck rate in bits per second (headers included); nil for no limit.
    public var rate: Int? = nil
    /// The bottleneck queue's size, as the longest a packet may wait in it.
    public var queue: Duration = Impairment.defaultQueue
    /// Receiver clock drift in parts per million; positive when the receiver's clock is fast.
    public var drift: Double = 0
    /// A recorded path to replay (see ``DelayTrace``).
    public var trace: DelayTrace? = nil

    public static let none = Impairment()
    public static let defaultQueue: Duration = .milliseconds(200)
    /// The longest any delay, spike or queue may hold a packet: a minute is a broken path,
    /// and a bound keeps the proxy's memory bounded.
    public static let longestDelay: Duration = .seconds(60)
    /// The slowest bottleneck: below 1 kbit/s not even one voice packet a second gets through.
    public static let slowestRate = 1_000
    /// The largest drift: quartz is good to ±100 ppm, cheap sound cards to a few hundred.
    public static let largestDrift = 10_000.0

    public init() {}

    public var isNone: Bool { self == .none }

    /// Checks every value and their combinations; each error says what is wrong and what
    /// is allowed.
    public func validate() throws(ImpairmentError) {
        guard (0...1).contains(loss) else {
            throw ImpairmentError(.loss, "a loss rate must be between 0% and 100%")
        }
        if let lossBurst {
            guard lossBurst >= 1, lossBurst.isFinite else {
                throw ImpairmentError(.lossBurst, "a mean burst length is a number of packets, at least 1")
            }
            guard LossModel.isPossible(rate: loss, meanBurstLength: lossBurst) else {
                let most = LossModel.maximumRate(meanBurstLength: lossBurst)
                throw ImpairmentError(
                    .loss,
                    "\(Format.percent(loss)) loss is impossible in bursts averaging \(Format.number(lossBurst)) packets "
                        + "(between bursts at least one packet arrives, so the most is \(Format.percent(most))); "
                        + "lower the loss or lengthen the bursts")
            }
        }
        try Self.check(delay, .delay)
        try Self.check(jitter, .jitter)
        if jitter > .zero && delay < jitter * jitterDistribution.smallestDelayPerJitter {
            let needed = { (shape: JitterDistribution) in
                "\(Format.duration(jitter * shape.smallestDelayPerJitter)) (\(shape == .normal ? "twice" : "half") the jitter)"
            }
            let remedies = jitterDistribution == .normal
                ? "raise the delay, lower the jitter, or use --jitter-distribution pareto, which needs \(needed(.pareto))"
                : "raise the delay or lower the jitter"
            throw ImpairmentError(
                .jitter,
                "a \(jitterDistribution.rawValue) jitter of \(Format.duration(jitter)) needs a mean delay of at least "
                    + "\(needed(jitterDistribution)), or delays would fall below zero and lose the mean and spread asked for; "
                    + remedies)
        }
        if let spike {
            try Self.check(spike.extraDelay, .spike)
            guard spike.period > .zero else {
                throw ImpairmentError(.spike, "a spike's period must be longer than zero, like 300ms/10s")
            }
            guard spike.length > .zero, spike.length <= spike.period else {
                throw ImpairmentError(
                    .spikeLength, "a spike must last longer than zero and no longer than its period (\(Format.duration(spike.period)))")
            }
        }
        guard (0...1).contains(duplicate) else {
            throw ImpairmentError(.duplicate, "a duplication rate must be between 0% and 100%")
        }
        if let rate, rate < Self.slowestRate {
            throw ImpairmentError(.rate, "a rate must be at least 1kbit (1,000 bits a second)")
        }
        try Self.check(queue, .queue)
        guard drift.isFinite, abs(drift) <= Self.largestDrift else {
            throw ImpairmentError(.drift, "a clock drift must be between -10000ppm and 10000ppm (±1%)")
        }
    }

    private static func check(_ duration: Duration, _ setting: ImpairmentSetting) throws(ImpairmentError) {
        guard duration >= .zero else {
            throw ImpairmentError(setting, "a \(setting.noun) cannot be negative; give a duration like 40ms or 1s")
        }
        guard duration <= longestDelay else {
            throw ImpairmentError(setting, "a \(setting.noun) can be at most 60s")
        }
    }

    /// One line for people: what this impairment does.
    public var summary: String {
        var parts: [String] = []
        if loss > 0 {
            if let lossBurst {
                parts.append("loss \(Format.percent(loss)) in bursts of \(Format.number(lossBurst))")
            } else {
                parts.append("loss \(Format.percent(loss))")
            }
        }
        if delay > .zero || jitter > .zero {
            var text = "delay \(Format.duration(delay))"
            if jitter > .zero {
                text += " ± \(Format.duration(jitter)) \(jitterDistribution.rawValue)"
            }
            parts.append(text)
        }
        if reorder { parts.append("reordering") }
        if let spike {
            parts.append(
                "spikes +\(Format.duration(spike.extraDelay)) for \(Format.duration(spike.length)) every \(Format.duration(spike.period))")
        }
        if duplicate > 0 { parts.append("duplicates \(Format.percent(duplicate))") }
        if let rate { parts.append("rate \(Format.bitRate(rate)) (queue \(Format.duration(queue)))") }
        if drift != 0 { parts.append("drift \(drift > 0 ? "+" : "")\(Format.number(drift)) ppm") }
        if let trace { parts.append("trace \(trace.source) (\(trace.entries.count) packets)") }
        return parts.isEmpty ? "no impairment" : parts.joined(separator: ", ")
    }
}

/// A setting of an ``Impairment``, named as its `parley netsim` flag.
public enum ImpairmentSetting: String, Sendable, CaseIterable {
    case loss
    case lossBurst = "burst"
    case delay
    case jitter
    case jitterDistribution = "jitter-distribution"
    case reorder
    case spike
    case spikeLength = "spike-length"
    case duplicate
    case rate
    case queue
    case drift
    case trace

    var noun: String {
        switch self {
        case .spike: return "spike"
        case .queue: return "queue limit"
        case .spikeLength: return "spike length"
        default: return rawValue
        }
    }
}

/// A value an ``Impairment`` cannot have: which setting, and why, in words.
public struct ImpairmentError: Error, Sendable, Equatable, CustomStringConvertible {
    public let setting: ImpairmentSetting
    public let reason: String

    public init(_ setting: ImpairmentSetting, _ reason: String) {
        self.setting = setting
        self.reason = reason
    }

    public var description: String { "\(setting.rawValue): \(reason)." }
}
