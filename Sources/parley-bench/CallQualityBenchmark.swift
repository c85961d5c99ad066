import ArgumentParser
import Foundation
import ParleyAudio
import ParleyClient
import ParleyEvaluation

/// `parley-bench call-quality`: what one listener got of one talker in a call, measured
/// from files: the talker's input, the listener's `--record-received` recording of them,
/// and both clients' `--stats-json` (whose CLOCK_MONOTONIC origins place the talker's
/// capture on the listener's playback timeline). The demo and `Benchmarks/quality-report`
/// run it after their calls; `SpeechComparison` says how each figure is measured.
///
/// Another receiver's output of the same call (a GStreamer pipeline fed the listener's
/// packets, `parley-bench replay`, an offline decode) is measured the same way, given the
/// CLOCK_MONOTONIC time its first sample played (`--received-started-at`) instead of the
/// listener's stats; and another talker (a GStreamer peer's sender) given the time its
/// input's first sample was spoken (`--sent-started-at`) instead of the talker's stats.
struct CallQualityBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "call-quality",
        abstract: "Mouth-to-ear delay, dropouts and envelope match of one talker at one listener.",
        discussion: """
            Example, after two `parley call`s on this machine:
              parley-bench call-quality --sent alice.wav --sender-stats alice.json \\
                  --received bob-heard/alice.wav --receiver-stats bob.json --json
            """)

    func validate() throws {
        guard (receiverStats == nil) != (receivedStartedAt == nil) else {
            throw ValidationError("give either --receiver-stats (a Parley listener) or --received-started-at (another receiver), not both or neither.")
        }
        guard (senderStats == nil) != (sentStartedAt == nil) else {
            throw ValidationError("give either --sender-stats (a Parley talker) or --sent-started-at (another sender), not both or neither.")
        }
    }

    @Option(help: ArgumentHelp("What the talker's call read as input (WAV, any rate).", valueName: "FILE.wav"))
    var sent: String

    @Option(help: ArgumentHelp("The talker's --stats-json.", valueName: "FILE"))
    var senderStats: String?

    @Option(help: ArgumentHelp("Instead of --sender-stats: when --sent's first sample was spoken (CLOCK_MONOTONIC ns).", valueName: "ns"))
    var sentStartedAt: UInt64?

    @Option(help: ArgumentHelp("The listener's --record-received file for this talker.", valueName: "FILE.wav"))
    var received: String

    @Option(help: ArgumentHelp("The listener's --stats-json.", valueName: "FILE"))
    var receiverStats: String?

    @Option(help: ArgumentHelp("Instead of --receiver-stats: when --received's first sample played (CLOCK_MONOTONIC ns).", valueName: "ns"))
    var receivedStartedAt: UInt64?

    @Option(help: ArgumentHelp("Also write the received audio aligned with the sent (48 kHz mono), for PESQ or STOI.", valueName: "FILE.wav"))
    var alignedOut: String?

    @Option(help: ArgumentHelp("And the sent audio at 48 kHz mono, cut to the same length.", valueName: "FILE.wav"))
    var referenceOut: String?

    @Flag(help: "Print one JSON object instead of text.")
    var json = false

    @Flag(help: "Also print each 400 ms window's delay and match.")
    var windows = false

    struct Report: Codable {
        var delayMedianMilliseconds: Double?
        var delayP95Milliseconds: Double?
        var delayMaxMilliseconds: Double?
        var envelopeCorrelation: Double
        var droppedSpeechPercent: Double
        var dropouts: Int
        var unmatchedWindows: Int
        var speechSeconds: Double
        /// Each 400 ms window of the sent signal: where it starts, its delay (nil when
        /// silent or unmatched) and how well it matched.
        var windows: [Window]

        struct Window: Codable {
            var startSeconds: Double
            var delayMilliseconds: Double?
            var match: Double
        }
    }

    func run() throws {
        let talker = try Self.load(sent)
        let heard = try Self.load(received)
        let captured = try Self.instant(
            sentStartedAt, orFrom: senderStats, \.captureStartedAtNanoseconds, "--sender-stats or --sent-started-at",
            missing: "captureStartedAtNanoseconds: the talker's call never captured audio")
        let played = try Self.instant(
            receivedStartedAt, orFrom: receiverStats, \.playbackStartedAtNanoseconds, "--receiver-stats or --received-started-at",
            missing: "playbackStartedAtNanoseconds: the listener's call never played audio")
        let offsetNanoseconds = Int64(bitPattern: captured &- played)
        let offset = Int(offsetNanoseconds * Int64(AudioClock.sampleRate) / 1_000_000_000)
        let comparison = SpeechComparison.compare(sent: talker, received: heard, offset: offset)
        if let alignedOut {
            try WAVAudio(sampleRate: AudioClock.sampleRate, samples: comparison.alignedReceived).write(to: alignedOut)
        }
        if let referenceOut {
            try WAVAudio(sampleRate: AudioClock.sampleRate, samples: talker).write(to: referenceOut)
        }
        let report = Report(
            delayMedianMilliseconds: comparison.delayPercentile(0.5), delayP95Milliseconds: comparison.delayPercentile(0.95),
            delayMaxMilliseconds: comparison.delaysMilliseconds.last, envelopeCorrelation: comparison.envelopeCorrelation,
            droppedSpeechPercent: comparison.droppedPercent, dropouts: comparison.dropouts,
            unmatchedWindows: comparison.unmatchedWindows,
            speechSeconds: Double(comparison.activeFrames * SpectralEnvelope.frame) / Double(AudioClock.sampleRate),
            windows: comparison.windows.map { window in
                Report.Window(
                    startSeconds: Double(window.start) / Double(AudioClock.sampleRate),
                    delayMilliseconds: window.delay.map { $0 * 1_000 / Double(AudioClock.sampleRate) }, match: window.match)
            })
        if windows {
            for window in comparison.windows {
                let start = Double(window.start) / Double(AudioClock.sampleRate)
                let delay = window.delay.map { String(format: "%6.1f ms", $0 * 1_000 / Double(AudioClock.sampleRate)) } ?? "     –   "
                print(String(format: "%6.2f s  delay %@  match %.2f", start, delay, window.match))
            }
        }
        if json {
            try printJSON(report)
        } else {
            func ms(_ value: Double?) -> String { value.map { String(format: "%.0f ms", $0) } ?? "–" }
            print("mouth-to-ear delay: median \(ms(report.delayMedianMilliseconds)), p95 \(ms(report.delayP95Milliseconds)), max \(ms(report.delayMaxMilliseconds))")
            print(String(format: "envelope match %.3f over %.1f s of speech; dropped %.1f%% of it in %d dropouts; %d windows unmatched",
                         report.envelopeCorrelation, report.speechSeconds, report.droppedSpeechPercent, report.dropouts, report.unmatchedWindows))
        }
    }

    /// A CLOCK_MONOTONIC instant given on the command line, or read from a call's
    /// `--stats-json`.
    static func instant(
        _ given: UInt64?, orFrom statsPath: String?, _ field: KeyPath<CallStatistics, UInt64?>, _ options: String, missing: String
    ) throws -> UInt64 {
        if let given { return given }
        guard let statsPath else { throw ValidationError("give \(options)") }
        guard let instant = try statistics(statsPath)[keyPath: field] else { throw ValidationError("\(statsPath) has no \(missing)") }
        return instant
    }

    /// A WAV file as 48 kHz mono.
    static func load(_ path: String) throws -> [Float] {
        let audio = try WAVAudio(contentsOf: path)
        return try Resampler.resample(audio.mono, from: audio.sampleRate, to: AudioClock.sampleRate)
    }

    static func statistics(_ path: String) throws -> CallStatistics {
        try JSONDecoder().decode(CallStatistics.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
    }
}
