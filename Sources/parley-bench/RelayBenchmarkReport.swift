struct RelayBenchmarkReport: Codable {
    var payloadBytes: Int
    var trialSeconds: Double
    var lossThreshold: Double
    var forwarderCPU: Int
    var loadCPU: Int
    var results: [FanoutResult]

    var table: String {
        var lines = [
            "| fan-out | relay max pps (<0.1% loss) | baseline max pps | relay/baseline | relay CPU at max | half-load p50 / p99 / p99.9 relay (µs) | half-load p50 / p99 / p99.9 baseline (µs) |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for result in results {
            let r = result.relay, b = result.baseline
            lines.append("| \(result.fanout) | \(Int(r.maximum.forwardedPacketsPerSecond))\(r.reachedTalkerLimit ? "+" : "") | \(Int(b.maximum.forwardedPacketsPerSecond))\(b.reachedTalkerLimit ? "+" : "") | \(percent(result.throughputRatio))\(result.searchRatios.map { " (median of \($0.map(percent).joined(separator: ", ")))" } ?? "") | \(Int(r.maximum.forwarderCPUPercent)) % | \(Int(r.halfLoad.latencyP50Microseconds)) / \(Int(r.halfLoad.latencyP99Microseconds)) / \(Int(r.halfLoad.latencyP999Microseconds)) | \(Int(b.halfLoad.latencyP50Microseconds)) / \(Int(b.halfLoad.latencyP99Microseconds)) / \(Int(b.halfLoad.latencyP999Microseconds)) |")
        }
        let encrypted = results.filter { $0.encrypted != nil }
        if !encrypted.isEmpty {
            lines += [
                "",
                "| fan-out | encrypted max pps (<0.1% loss) | plaintext max pps | encrypted/plaintext | encrypted CPU at max | half-load p50 / p99 / p99.9 encrypted (µs) | added p99 vs plaintext (µs) |",
                "| --- | --- | --- | --- | --- | --- | --- |",
            ]
            for result in encrypted {
                let e = result.encrypted!, r = result.relay
                lines.append("| \(result.fanout) | \(Int(e.maximum.forwardedPacketsPerSecond))\(e.reachedTalkerLimit ? "+" : "") | \(Int(r.maximum.forwardedPacketsPerSecond)) | \(percent(result.encryptedThroughputRatio ?? 0)) | \(Int(e.maximum.forwarderCPUPercent)) % | \(Int(e.halfLoad.latencyP50Microseconds)) / \(Int(e.halfLoad.latencyP99Microseconds)) / \(Int(e.halfLoad.latencyP999Microseconds)) | \(Int(e.halfLoad.latencyP99Microseconds - r.halfLoad.latencyP99Microseconds)) |")
            }
        }
        return lines.joined(separator: "\n")
    }
}
