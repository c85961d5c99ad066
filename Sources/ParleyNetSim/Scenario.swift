/// A named network, ready for tests (`Scenario.named("wifi-bad")`) and the command line
/// (`parley netsim --scenario wifi-bad`). "Up" is client to relay, "down" relay to client.
/// Flags given with a scenario override its values one by one.
///
/// The first three follow published measurements of real access paths; the rest are
/// synthetic test conditions, each tied to the standard or test it stands for. Every
/// scenario's ``about`` says which, and which of its numbers are the scenario's own choice.
///
/// | scenario | up (client → relay) | down (relay → client) | follows |
/// | --- | --- | --- | --- |
/// | `clean` | nothing | nothing | loopback |
/// | `wifi-bad` | loss 4% in bursts of 2, delay 7 ms ± 8 ms pareto, spikes +250 ms for 150 ms every 10 s | same | Sui et al., MobiSys 2016; Mondal et al., ICC 2010 |
/// | `mobile-bursty` | loss 1% in bursts of 4, delay 60 ms ± 15 ms normal, spikes +300 ms for 1 s every 15 s | same | 3GPP TS 23.203 QCI 1 and 9; Ericsson on LTE handovers |
/// | `congested-vps` | loss 0.5% in bursts of 13, delay 32 ms ± 12 ms pareto, spikes +100 ms for 2 s every 20 s | same | ITU-T G.1050 severity D; Wang and Ng, INFOCOM 2010; Whiteaker et al., CCR 2011 |
/// | `loss-5` | loss 5% | same | synthetic: the quality benchmark's random loss |
/// | `bursty-10` | loss 10% in bursts of 3 | same | synthetic: the quality benchmark's bursty loss |
/// | `loss-20` | loss 20% | same | synthetic: the quality benchmark's random loss |
/// | `jitter-40` | delay 120 ms ± 40 ms normal, reordering | same | synthetic: beyond ITU-T Y.1541's 50 ms delay-variation bound |
/// | `spike-300` | delay 20 ms, spikes +300 ms for 1 s every 5 s | same | synthetic: ITU-T G.1050 link failures (256–400 ms), far more often |
/// | `duplicate-5` | duplicates 5%, delay 20 ms ± 5 ms normal | same | synthetic |
/// | `drift-300` | delay 40 ms, drift +300 ppm | delay 40 ms, drift −300 ppm | synthetic: two sound cards' clocks |
public struct Scenario: Sendable, Equatable {
    public let name: String
    /// What the scenario stands for, in one sentence.
    public let about: String
    public var up: Impairment
    public var down: Impairment

    public init(name: String, about: String, up: Impairment, down: Impairment) {
        self.name = name
        self.about = about
        self.up = up
        self.down = down
    }

    public init(name: String, about: String, both: Impairment) {
        self.init(name: name, about: about, up: both, down: both)
    }

    /// The scenario called `name`, or an error that lists the known names.
    public static func named(_ name: String) throws(ScenarioError) -> Scenario {
        guard let scenario = all.first(where: { $0.name == name.lowercased() }) else {
            throw ScenarioError(name: name)
        }
        return scenario
    }

    public static var names: [String] { all.map(\.name) }

    public static let all: [Scenario] = [
        Scenario(name: "clean", about: "A perfect network: nothing is lost, delayed or reordered.", both: .none),
        Scenario(
            name: "wifi-bad",
            about: "Crowded Wi-Fi. Delay as Sui et al. measured Wi-Fi latency over 47,000 devices (\"Characterizing and "
                + "improving WiFi latency in large-scale operational networks\", MobiSys 2016): long-tailed, 90th "
                + "percentile about 20 ms, 99th about 250 ms; here a queue behind bursts, half the packets at 3 ms, and "
                + "stalls of 250 ms (90th percentile 22 ms, 99th 250 ms; the stalls' length and period are ours). Loss "
                + "4%, what Mondal et al. (\"A case for WiFi relay\", ICC 2010) saw in the worst 5-10% of VoIP sessions "
                + "with a Wi-Fi end, in short bursts (a mean of 2 is ours).",
            both: build {
                $0.loss = 0.04
                $0.lossBurst = 2
                $0.delay = .milliseconds(7)
                $0.jitter = .milliseconds(8)
                $0.jitterDistribution = .pareto
                $0.spike = DelaySpike(extraDelay: .milliseconds(250), every: .seconds(10), lasting: .milliseconds(150))
            }),
        Scenario(
            name: "mobile-bursty",
            about: "A phone on 4G moving between cells. Delay 60 ms ± 15 ms: its 98th percentile, 91 ms, inside the 100 ms "
                + "that 3GPP TS 23.203 (table 6.1.7) budgets for conversational voice (QCI 1) at 98%. Loss 1%, that class's "
                + "packet loss rate, in bursts of 4: a handover's 50-90 ms break (Ericsson's figure) in 20 ms packets. "
                + "Stalls of 300 ms, the delay budget of the best-effort bearer an app's voice rides (QCI 9), for 1 s "
                + "every 15 s (length and period ours).",
            both: build {
                $0.loss = 0.01
                $0.lossBurst = 4
                $0.delay = .milliseconds(60)
                $0.jitter = .milliseconds(15)
                $0.spike = DelaySpike(extraDelay: .milliseconds(300), every: .seconds(15))
            }),
        Scenario(
            name: "congested-vps",
            about: "A relay on an oversold VPS. The path is ITU-T G.1050 (2007) impairment severity D: 32 ms of regional "
                + "backbone, jitter up to 40 ms (a deviation of 12 ms), link failures of 256 ms (here 0.5% loss in bursts "
                + "of 13, far more often than G.1050's one in 15 minutes). The jitter is a queue's, as a host's scheduler "
                + "makes it (Wang and Ng saw small EC2 instances get 40-50% of a core, INFOCOM 2010), and busy "
                + "neighbours add 100 ms, the most Whiteaker et al. saw competing VMs add (\"Explaining packet delays "
                + "under virtualization\", CCR 2011), for 2 s every 20 s (length and period ours).",
            both: build {
                $0.loss = 0.005
                $0.lossBurst = 13
                $0.delay = .milliseconds(32)
                $0.jitter = .milliseconds(12)
                $0.jitterDistribution = .pareto
                $0.spike = DelaySpike(extraDelay: .milliseconds(100), every: .seconds(20), lasting: .seconds(2))
            }),
        Scenario(
            name: "loss-5",
            about: "Synthetic: 5% of packets lost, independently, one of the random-loss conditions Parley's quality "
                + "benchmark holds against an ideal decoder.",
            both: build { $0.loss = 0.05 }),
        Scenario(
            name: "bursty-10",
            about: "Synthetic: 10% of packets lost in bursts of 3 on average, the quality benchmark's bursty condition, "
                + "beyond what in-band FEC (one packet back) repairs.",
            both: build {
                $0.loss = 0.10
                $0.lossBurst = 3
            }),
        Scenario(
            name: "loss-20",
            about: "Synthetic: 20% of packets lost, independently, the quality benchmark's harshest random loss.",
            both: build { $0.loss = 0.20 }),
        Scenario(
            name: "jitter-40",
            about: "Synthetic: 40 ms of normal jitter around 120 ms, packets overtaking each other. Its delay variation as "
                + "ITU-T Y.1541 measures it (the 99.9th percentile less the minimum) is about 250 ms, five times the "
                + "50 ms Y.1541 allows interactive voice (classes 0 and 1).",
            both: build {
                $0.delay = .milliseconds(120)
                $0.jitter = .milliseconds(40)
                $0.reorder = true
            }),
        Scenario(
            name: "spike-300",
            about: "Synthetic: 20 ms, with 300 ms more for 1 s every 5 s: a stall between ITU-T G.1050's link failures "
                + "of severities D and E (256 and 400 ms), a hundred times as often, to test recovery.",
            both: build {
                $0.delay = .milliseconds(20)
                $0.spike = DelaySpike(extraDelay: .milliseconds(300), every: .seconds(5))
            }),
        Scenario(
            name: "duplicate-5",
            about: "Synthetic: 5% of packets arrive twice, over a 20 ms ± 5 ms path, to test that copies are dropped.",
            both: build {
                $0.duplicate = 0.05
                $0.delay = .milliseconds(20)
                $0.jitter = .milliseconds(5)
            }),
        Scenario(
            name: "drift-300",
            about: "Synthetic: clocks 300 ppm apart, the relay's fast against the client's going up and slow coming "
                + "down, as two sound cards' crystals, each within a few hundred ppm, can be.",
            up: build {
                $0.delay = .milliseconds(40)
                $0.drift = 300
            },
            down: build {
                $0.delay = .milliseconds(40)
                $0.drift = -300
            }),
    ]

    private static func build(_ configure: (inout Impairment) -> Void) -> Impairment {
        var impairment = Impairment()
        configure(&impairment)
        return impairment
    }
}

public struct ScenarioError: Error, Sendable, Equatable, CustomStringConvertible {
    public let name: String

    public init(name: String) { self.name = name }

    public var description: String {
        "there is no scenario called '\(name)'; the scenarios are \(Scenario.names.joined(separator: ", "))."
    }
}
