struct TrialResult: Codable {
    var rooms: Int
    var members: Int
    var offeredPacketsPerSecond: Double
    var forwardedPacketsPerSecond: Double
    var expectedPacketsPerSecond: Double
    var loss: Double
    var duplicates: Int
    var latencyP50Microseconds: Double
    var latencyP99Microseconds: Double
    var latencyP999Microseconds: Double
    /// The forwarder's CPU use, in percent of one core.
    var forwarderCPUPercent: Double
    /// The load generator's, to show it was not the bottleneck.
    var generatorCPUPercent: Double
    /// How busy the forwarder's CPU was in all (kernel softirq work of loopback delivery
    /// included, which the process's own counters miss; and anything else running there).
    var forwarderCoreBusyPercent: Double = 0
    var forwarderCoreSoftirqPercent: Double = 0
    /// Where the lost copies were lost: datagrams the kernel dropped during the trial at the
    /// forwarder's full receive buffer, and at the generator's (which receives every copy: at
    /// high fan-outs its one thread, not the forwarder, can be what overflows).
    var forwarderSocketDrops = 0
    var generatorSocketDrops = 0

    /// The kernel's drops, when there were any.
    private var drops: String {
        forwarderSocketDrops == 0 && generatorSocketDrops == 0 ? ""
            : ", kernel drops at the forwarder's socket \(forwarderSocketDrops), at the generator's \(generatorSocketDrops)"
    }

    var line: String {
        // A trial that received nothing has no latency (NaN), said as "–".
        func microseconds(_ value: Double) -> String { value.isFinite ? "\(Int(value)) µs" : "–" }
        return "\(rooms) rooms × \(members): \(Int(forwardedPacketsPerSecond)) forwarded/s of \(Int(expectedPacketsPerSecond)), loss \(percent(loss)), latency p50 \(microseconds(latencyP50Microseconds)) p99 \(microseconds(latencyP99Microseconds)) p99.9 \(microseconds(latencyP999Microseconds)), CPU \(Int(forwarderCPUPercent)) % (core busy \(Int(forwarderCoreBusyPercent)) %, softirq \(Int(forwarderCoreSoftirqPercent)) %; generator \(Int(generatorCPUPercent)) %)\(drops)"
    }
}
