import ArgumentParser

/// `parley-bench trunk`: what a trunk hop costs. In the same run, on the same pinned core and
/// with the same load generator as `parley-bench relay` (its capacity search, its trials):
///
/// - direct: one encrypted relay, every member of a room on it;
/// - trunked: two encrypted relays sharing that core, each room's first member on relay A,
///   the others on relay B, the room's trunk between them, so every stream crosses it.
///
/// Reported: the forwarded packets/s each sustains with < 0.1 % loss on the one core (the
/// trunked figure is what a core carries when each packet also crosses a trunk: two relays'
/// work), their ratio, and the latency p50 / p99 of both at the same load (half the trunked
/// pair's capacity), whose difference is what the trunk hop adds.
struct TrunkBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "trunk",
        abstract: "Forwarding capacity per core and added latency of a relay-to-relay trunk, against one relay in the same run.",
        discussion: """
        Build in release first:
          swift build -c release --product parley-bench
          .build/release/parley-bench trunk --json
        """
    )

    @Option(help: "Fan-outs to measure (receivers per packet), comma-separated.")
    var fanouts: String = "1,4"
    @Option(help: "Seconds of traffic per trial (after 0.5 s of warm-up).")
    var seconds: Double = 3
    @Option(help: "CPU for the relays' loops.")
    var forwarderCPU: Int = 0
    @Option(help: "CPU for the load generator.")
    var loadCPU: Int = 1
    @Option(help: "Largest number of talkers tried.")
    var maximumTalkers: Int = 4000
    @Option(help: "Instead of searching: trials of this many rooms per fan-out, direct and trunked in turn (--trials times each), with the relays' drop counts, and the medians of latency and of the relays' CPU time per forwarded packet.")
    var fixedRooms: Int?
    @Option(help: "With --fixed-rooms: how many direct and trunked trials, alternating.")
    var trials: Int = 1
    @Flag(help: "Print the results as JSON on stdout.")
    var json = false

    struct Result: Codable {
        var fanout: Int
        var direct: ForwardingCapacity
        var trunked: ForwardingCapacity
        /// Trunked over direct forwarded packets/s, one core each.
        var capacityRatio: Double
        /// Both at the same load: half the trunked pair's capacity.
        var directAtSameLoad: TrialResult
        var trunkedAtSameLoad: TrialResult
        var addedP50Microseconds: Double
        var addedP99Microseconds: Double

        var line: String {
            "fan-out \(fanout): direct \(Int(direct.maximum.forwardedPacketsPerSecond)) pps, trunked \(Int(trunked.maximum.forwardedPacketsPerSecond)) pps "
                + "(\(percent(capacityRatio)) of direct on one core); at \(Int(trunkedAtSameLoad.forwardedPacketsPerSecond)) pps p50/p99 direct "
                + "\(Int(directAtSameLoad.latencyP50Microseconds))/\(Int(directAtSameLoad.latencyP99Microseconds)) µs, trunked "
                + "\(Int(trunkedAtSameLoad.latencyP50Microseconds))/\(Int(trunkedAtSameLoad.latencyP99Microseconds)) µs: the trunk hop adds "
                + "\(Int(addedP50Microseconds)) µs at p50, \(Int(addedP99Microseconds)) µs at p99"
        }
    }

    func run() throws {
        raiseFileLimit()
        pin(cpu: loadCPU)
        let fanoutList = fanouts.split(separator: ",").compactMap { Int($0.filter { $0 != " " }) }
        guard !fanoutList.isEmpty, fanoutList.allSatisfy({ (1...20).contains($0) }) else {
            throw ValidationError("--fanouts takes numbers from 1 to 20, e.g. 1,4")
        }
        // The relay benchmark's search and trials, with this command's settings.
        let search = try RelayBenchmark.parse([
            "--seconds", "\(seconds)", "--forwarder-cpu", "\(forwarderCPU)", "--load-cpu", "\(loadCPU)",
            "--maximum-talkers", "\(maximumTalkers)",
        ])
        if let fixedRooms {
            var summaries: [FixedLoadSummary] = []
            for fanout in fanoutList {
                var measured: [Bool: [TrialResult]] = [false: [], true: []]
                for _ in 0..<max(self.trials, 1) {
                    for trunked in [false, true] {
                        let relays = try TrunkedRelays(trunked: trunked, cpu: forwarderCPU)
                        defer { relays.stop() }
                        let trial = try search.runTrial(rooms: fixedRooms, members: fanout + 1, forwarder: relays)
                        log("\(trunked ? "trunked" : "direct"): \(trial.line)")
                        for (index, relay) in relays.relays.enumerated() {
                            let drops = try relay.metricsText().split(separator: "\n").filter { $0.hasPrefix("parley_relay_packets_dropped_total") && !$0.hasSuffix(" 0") }
                            if !drops.isEmpty { log("  relay \(index) drops: \(drops.joined(separator: ", "))") }
                        }
                        measured[trunked]!.append(trial)
                    }
                }
                let summary = FixedLoadSummary(fanout: fanout, rooms: fixedRooms, direct: measured[false]!, trunked: measured[true]!)
                log(summary.line)
                summaries.append(summary)
            }
            if json { try printJSON(summaries) } else { for summary in summaries { print(summary.line) } }
            return
        }
        var results: [Result] = []
        for fanout in fanoutList {
            log("fan-out \(fanout): searching one relay's capacity (direct)")
            let direct = try search.findCapacity(fanout: fanout) { try TrunkedRelays(trunked: false, cpu: forwarderCPU) }
            log("fan-out \(fanout): searching two relays' capacity, every stream across a trunk")
            let trunked = try search.findCapacity(fanout: fanout) { try TrunkedRelays(trunked: true, cpu: forwarderCPU) }
            log("fan-out \(fanout): one relay at the trunked pair's half load")
            let same = try search.runTrial(rooms: trunked.halfLoad.rooms, members: fanout + 1, forwarder: TrunkedRelays(trunked: false, cpu: forwarderCPU))
            log("  \(same.line)")
            let result = Result(
                fanout: fanout, direct: direct, trunked: trunked,
                capacityRatio: trunked.maximum.forwardedPacketsPerSecond / direct.maximum.forwardedPacketsPerSecond,
                directAtSameLoad: same, trunkedAtSameLoad: trunked.halfLoad,
                addedP50Microseconds: trunked.halfLoad.latencyP50Microseconds - same.latencyP50Microseconds,
                addedP99Microseconds: trunked.halfLoad.latencyP99Microseconds - same.latencyP99Microseconds)
            log(result.line)
            results.append(result)
        }
        if json { try printJSON(results) } else { for result in results { print(result.line) } }
    }
}

/// Direct and trunked trials at one load, alternated so both see the same machine: the
/// medians of their latency, and of the relays' CPU time per forwarded packet (all relays of
/// the trial, on the one core), whose ratio is what a trunk hop costs a core.
struct FixedLoadSummary: Codable {
    var fanout: Int
    var rooms: Int
    var direct: [TrialResult]
    var trunked: [TrialResult]

    static func median(_ values: [Double]) -> Double {
        let sorted = values.filter(\.isFinite).sorted()
        return sorted.isEmpty ? .nan : sorted[sorted.count / 2]
    }

    /// Microseconds of relay CPU per forwarded packet.
    static func cpuPerPacket(_ trial: TrialResult) -> Double {
        trial.forwardedPacketsPerSecond > 0 ? trial.forwarderCPUPercent / 100 / trial.forwardedPacketsPerSecond * 1e6 : .nan
    }

    var directP50: Double { Self.median(direct.map(\.latencyP50Microseconds)) }
    var trunkedP50: Double { Self.median(trunked.map(\.latencyP50Microseconds)) }
    var directP99: Double { Self.median(direct.map(\.latencyP99Microseconds)) }
    var trunkedP99: Double { Self.median(trunked.map(\.latencyP99Microseconds)) }
    var directCPU: Double { Self.median(direct.map(Self.cpuPerPacket)) }
    var trunkedCPU: Double { Self.median(trunked.map(Self.cpuPerPacket)) }

    var line: String {
        String(format: "fan-out %d, %d rooms, medians of %d trials each: p50 direct %.0f µs, trunked %.0f µs (+%.0f); p99 direct %.0f µs, trunked %.0f µs (+%.0f); relay CPU per forwarded packet direct %.2f µs, trunked %.2f µs (%.0f %%: a core carries %.0f %% of the packets/s across a trunk)",
               fanout, rooms, direct.count, directP50, trunkedP50, trunkedP50 - directP50, directP99, trunkedP99, trunkedP99 - directP99,
               directCPU, trunkedCPU, trunkedCPU / directCPU * 100, directCPU / trunkedCPU * 100)
    }
}
