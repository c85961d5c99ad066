/// A named network, ready for tests (`Scenario.named("wifi-bad")`) and the command line
/// (`parley netsim --scenario wifi-bad`). "Up" is client to relay, "down" relay to client.
/// Flags given with a scenario override its values one by one.
///
/// | scenario | up (client → relay) | down (relay → client) |
/// | --- | --- | --- |
/// | `clean` | nothing | nothing |
/// | `wifi-bad` | loss 3% in bursts of 2, delay 15 ms ± 20 ms pareto, duplicates 1%, spikes +200 ms for 300 ms every 10 s | same |
/// | `mobile-bursty` | loss 4% in bursts of 6, delay 60 ms ± 15 ms normal, spikes +400 ms for 1 s every 15 s, rate 256 kbit/s (queue 500 ms) | same, no rate limit |
/// | `congested-vps` | loss 2% in bursts of 3, delay 30 ms ± 15 ms pareto, spikes +200 ms for 2 s every 20 s | same |
/// | `loss-5` | loss 5% | same |
/// | `bursty-10` | loss 10% in bursts of 3 | same |
/// | `loss-20` | loss 20% | same |
/// | `jitter-40` | delay 120 ms ± 40 ms normal, reordering | same |
/// | `spike-300` | delay 20 ms, spikes +300 ms for 1 s every 5 s | same |
/// | `duplicate-5` | duplicates 5%, delay 20 ms ± 5 ms normal | same |
/// | `drift-300` | delay 40 ms, drift +300 ppm | delay 40 ms, drift −300 ppm |
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
            about: "Crowded Wi-Fi at the edge of range: retries give heavy-tailed jitter and duplicates, "
                + "failed retries short loss bursts, background scans delay spikes.",
            both: build {
                $0.loss = 0.03
                $0.lossBurst = 2
                $0.delay = .milliseconds(15)
                $0.jitter = .milliseconds(20)
                $0.jitterDistribution = .pareto
                $0.duplicate = 0.01
                $0.spike = DelaySpike(extraDelay: .milliseconds(200), every: .seconds(10), lasting: .milliseconds(300))
            }),
        Scenario(
            name: "mobile-bursty",
            about: "A phone on 4G moving between cells: long loss bursts at handovers, a stall every 15 s, "
                + "and a capped uplink.",
            up: mobile(rate: 256_000),
            down: mobile(rate: nil)),
        Scenario(
            name: "congested-vps",
            about: "A relay on an oversold VPS: a busy host queues packets (heavy-tailed delay), drops them "
                + "in bursts, and now and then stalls for seconds.",
            both: build {
                $0.loss = 0.02
                $0.lossBurst = 3
                $0.delay = .milliseconds(30)
                $0.jitter = .milliseconds(15)
                $0.jitterDistribution = .pareto
                $0.spike = DelaySpike(extraDelay: .milliseconds(200), every: .seconds(20), lasting: .seconds(2))
            }),
        Scenario(name: "loss-5", about: "5% of packets lost, independently.", both: build { $0.loss = 0.05 }),
        Scenario(
            name: "bursty-10", about: "10% of packets lost, in bursts of 3 on average.",
            both: build {
                $0.loss = 0.10
                $0.lossBurst = 3
            }),
        Scenario(name: "loss-20", about: "20% of packets lost, independently.", both: build { $0.loss = 0.20 }),
        Scenario(
            name: "jitter-40", about: "40 ms of normal jitter around 120 ms, with packets overtaking each other.",
            both: build {
                $0.delay = .milliseconds(120)
                $0.jitter = .milliseconds(40)
                $0.reorder = true
            }),
        Scenario(
            name: "spike-300", about: "20 ms, with 300 ms more for 1 s every 5 s.",
            both: build {
                $0.delay = .milliseconds(20)
                $0.spike = DelaySpike(extraDelay: .milliseconds(300), every: .seconds(5))
            }),
        Scenario(
            name: "duplicate-5", about: "5% of packets arrive twice, over a 20 ms ± 5 ms path.",
            both: build {
                $0.duplicate = 0.05
                $0.delay = .milliseconds(20)
                $0.jitter = .milliseconds(5)
            }),
        Scenario(
            name: "drift-300",
            about: "Clocks 300 ppm apart: the relay's clock fast against the client's going up, slow coming down.",
            up: build {
                $0.delay = .milliseconds(40)
                $0.drift = 300
            },
            down: build {
                $0.delay = .milliseconds(40)
                $0.drift = -300
            }),
    ]

    private static func mobile(rate: Int?) -> Impairment {
        build {
            $0.loss = 0.04
            $0.lossBurst = 6
            $0.delay = .milliseconds(60)
            $0.jitter = .milliseconds(15)
            $0.spike = DelaySpike(extraDelay: .milliseconds(400), every: .seconds(15))
            $0.rate = rate
            $0.queue = .milliseconds(500)
        }
    }

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
