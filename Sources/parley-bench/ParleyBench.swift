import ArgumentParser

/// Benchmarks kept in the repository. Each one measures a baseline in the same run and
/// reports Parley's figures as ratios against it, so numbers from different machines
/// compare; BENCHMARKS.md records them for this project's reference machine.
@main
struct ParleyBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "parley-bench",
        abstract: "Measure Parley's relay, network simulator and audio engine.",
        subcommands: [
            // Each benchmark adds its subcommand here, one per line.
            RelayBenchmark.self,
            NetsimBenchmark.self,
            AudioBenchmark.self,
            CallQualityBenchmark.self,
            SenderProtectionBenchmark.self,
            IdealDecoderCommand.self,
            ReplayCommand.self,
            RelayMemoryBenchmark.self,
            AdmissionFloodBenchmark.self,
            TrunkBenchmark.self,
            ClusterJoinBenchmark.self,
            ClientAllocationsBenchmark.self,
            RelayAllocationsBenchmark.self,
        ]
    )
}
