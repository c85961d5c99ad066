import ArgumentParser
import Foundation
import ParleyAudio
import ParleyClient

/// `parley-bench replay`: a listener's received packets played through today's
/// `JitterBuffer` offline, as the playback thread would have: every packet inserted at its
/// recorded arrival time, a period read every `--period-ms` of that same clock. A playout
/// change is scored in seconds against a recorded call instead of a new one
/// (`Benchmarks/one-talker-report --replay`).
///
/// Only the buffer's public interface is used (`insert`, `read`, `currentStatistics`), so
/// any playout engine behind it replays the same way.
///
/// Where the reads fall against the arrivals matters: today's buffer often decides between
/// FEC and concealment within a few milliseconds, so `--start-at` the listener's own
/// playback start makes the reads fall when the call's did (its file or sound card paces
/// them from that instant, a period at a time).
struct ReplayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Play a listener's recorded packets through the jitter buffer offline.",
        discussion: """
            Example, after a call with --packet-trace listener.csv:
              parley-bench replay --trace listener.csv --out replayed.wav --json

            The output's first sample plays at playbackStartedAtNanoseconds (CLOCK_MONOTONIC,
            printed), so `parley-bench call-quality --received-started-at` can set it against
            the talker's input.
            """)

    @Option(help: ArgumentHelp("The listener's --packet-trace.", valueName: "FILE.csv"))
    var trace: String

    @Option(help: ArgumentHelp("The talker's SSRC (default: the one with most packets received).", valueName: "n"))
    var ssrc: UInt32?

    @Option(help: ArgumentHelp("Write what the buffer played here (48 kHz mono).", valueName: "FILE.wav"))
    var out: String

    @Option(help: ArgumentHelp("Playback period, milliseconds (the client's is 10).", valueName: "ms"))
    var periodMs: Int = 10

    @Option(help: ArgumentHelp("Start playing this long before the first packet arrives, seconds.", valueName: "seconds"))
    var lead: Double = 1

    @Option(help: ArgumentHelp(
        "Instead of --lead: start playing at this CLOCK_MONOTONIC time, ns (the listener's playbackStartedAtNanoseconds, so the reads fall when the call's did).",
        valueName: "ns"))
    var startAt: UInt64?

    @Option(help: ArgumentHelp(
        "Also write the buffer's delay every period as CSV: seconds (from the start of playback), delay_ms, target_ms, rate, and its running counts: frames decoded, played from copies, rebuilt from FEC, concealed; ms of underrun, shortening, lengthening and stretching while waiting.",
        valueName: "FILE.csv"))
    var delayTrace: String?

    @Option(help: ArgumentHelp(
        "Also write every playout decision as CSV: seconds, the operation, and what it was decided from (the next frame's state, lead and target lead in ms, pending audio in ms, dry concealment in ms).",
        valueName: "FILE.csv"))
    var decisions: String?

    @Flag(help: "Print one JSON object instead of text.")
    var json = false

    struct Report: Codable {
        var ssrc: UInt32
        var packets: Int
        var playbackStartedAtNanoseconds: UInt64
        var seconds: Double
        var decodedFrames: Int
        var redundancyRecoveredFrames: Int
        var fecRecoveredFrames: Int
        var concealedFrames: Int
        var fecRecoveredPercent: Double
        var concealedPercent: Double
        var underruns: Int
        var latePackets: Int
        var finalTargetDelayMilliseconds: Double
    }

    func validate() throws {
        guard (1...100).contains(periodMs) else { throw ValidationError("--period-ms \(periodMs) must be 1–100.") }
        guard lead.isFinite, (0...60).contains(lead) else { throw ValidationError("--lead \(lead) must be 0–60 seconds.") }
    }

    func run() throws {
        let received = try PacketTrace.read(contentsOf: trace).filter { $0.direction == .received }
        let counts = Dictionary(grouping: received, by: \.ssrc).mapValues(\.count)
        guard let talker = ssrc ?? counts.max(by: { $0.value < $1.value })?.key else {
            throw ValidationError("\(trace) has no received packets: was it the listener's --packet-trace?")
        }
        let packets = received.filter { $0.ssrc == talker }.sorted { $0.nanoseconds < $1.nanoseconds }
        guard let first = packets.first, let last = packets.last else {
            throw ValidationError("\(trace) has no packets of SSRC \(talker) (it has \(counts.keys.sorted().map(String.init).joined(separator: ", ")))")
        }

        let buffer = try JitterBuffer(JitterBuffer.Configuration())
        let periodSamples = AudioClock.samples(milliseconds: periodMs)
        let periodNanoseconds = UInt64(periodMs) * 1_000_000
        let leadNanoseconds = UInt64(lead * 1e9)
        var start = first.nanoseconds > leadNanoseconds ? first.nanoseconds - leadNanoseconds : 0
        if let startAt {
            guard startAt <= first.nanoseconds else {
                throw ValidationError("--start-at \(startAt) is after the first packet arrived (\(first.nanoseconds)): give the listener's playbackStartedAtNanoseconds")
            }
            start = startAt
        }
        let end = last.nanoseconds + 1_000_000_000
        guard end - start <= 4 * 3_600 * 1_000_000_000 else {
            throw ValidationError("\(trace) spans \((end - start) / 1_000_000_000) s from the start of playback; replay takes at most 4 hours")
        }
        func seconds(_ nanoseconds: UInt64) -> Double { Double(nanoseconds - start) / 1e9 }

        var output: [Float] = []
        output.reserveCapacity(Int((end - start) / periodNanoseconds + 1) * periodSamples)
        var period = [Float](repeating: 0, count: periodSamples)
        var delays = delayTrace == nil
            ? "" : "seconds,delay_ms,target_ms,rate,decoded,copies,fec,concealed,underrun_ms,accelerated_ms,expanded_ms,waited_ms\n"
        var next = 0
        var now = start
        var decisionLines = "seconds,operation,next,lead_ms,target_ms,safe_ms,pending_ms,dry_ms,in_time_ms\n"
        if decisions != nil {
            buffer.decisionObserver = { operation, observation in
                decisionLines += String(format: "%.3f,%@,%@,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f\n", seconds(now), Self.label(operation), "\(observation.next)",
                                        observation.lead * 1_000, observation.targetLead * 1_000, observation.safeLead * 1_000,
                                        observation.pending * 1_000, observation.dryConcealed * 1_000, observation.coveredInTime * 1_000)
            }
        }
        while now <= end {
            while next < packets.count, packets[next].nanoseconds <= now {
                let packet = packets[next]
                packet.payload.withUnsafeBytes { payload in
                    IncomingFrames.forEach(
                        payloadType: packet.payloadType, payload: payload, sequenceNumber: packet.sequenceNumber, timestamp: packet.timestamp
                    ) { frame in
                        buffer.insert(
                            payload: frame.payload, sequenceNumber: frame.sequenceNumber, timestamp: frame.timestamp,
                            arrival: seconds(packet.nanoseconds), isRedundant: frame.isRedundant)
                    }
                }
                next += 1
            }
            let playing = period.withUnsafeMutableBufferPointer { buffer.read(into: $0, now: seconds(now)) }
            output += period
            if delayTrace != nil, playing {
                let statistics = buffer.currentStatistics
                func ms(_ samples: Int) -> Double { Double(samples) * 1_000 / Double(AudioClock.sampleRate) }
                delays += String(format: "%.2f,%.2f,%.2f,%.5f,%d,%d,%d,%d,%.1f,%.1f,%.1f,%.1f\n", seconds(now), statistics.currentDelayMilliseconds,
                                 statistics.targetDelayMilliseconds, statistics.playbackRate, statistics.decodedFrames,
                                 statistics.redundancyRecovered, statistics.fecRecovered, statistics.concealedFrames,
                                 ms(statistics.underrunSamples), ms(statistics.acceleratedSamples), ms(statistics.expandedSamples),
                                 ms(statistics.waitStretchedSamples))
            }
            now += periodNanoseconds
        }
        try WAVAudio(sampleRate: AudioClock.sampleRate, samples: output).write(to: out)
        if let decisions {
            do {
                try decisionLines.write(toFile: decisions, atomically: true, encoding: .utf8)
            } catch {
                throw ValidationError("--decisions \(decisions): cannot write it (\(error.localizedDescription))")
            }
        }
        if let delayTrace {
            do {
                try delays.write(toFile: delayTrace, atomically: true, encoding: .utf8)
            } catch {
                throw ValidationError("--delay-trace \(delayTrace): cannot write it (\(error.localizedDescription))")
            }
        }

        let statistics = buffer.currentStatistics
        let frames = Double(statistics.decodedFrames + statistics.redundancyRecovered + statistics.fecRecovered + statistics.concealedFrames)
        func percent(_ count: Int) -> Double { frames > 0 ? 100 * Double(count) / frames : 0 }
        let report = Report(
            ssrc: talker, packets: packets.count, playbackStartedAtNanoseconds: start,
            seconds: Double(output.count) / Double(AudioClock.sampleRate),
            decodedFrames: statistics.decodedFrames, redundancyRecoveredFrames: statistics.redundancyRecovered,
            fecRecoveredFrames: statistics.fecRecovered,
            concealedFrames: statistics.concealedFrames, fecRecoveredPercent: percent(statistics.fecRecovered),
            concealedPercent: percent(statistics.concealedFrames), underruns: statistics.underruns,
            latePackets: statistics.late, finalTargetDelayMilliseconds: statistics.targetDelayMilliseconds)
        if json {
            try printJSON(report)
        } else {
            print(String(format: "%d packets of SSRC %u replayed over %.1f s: %d frames decoded, %d played from redundant copies, %d rebuilt from FEC (%.1f %%), %d concealed (%.1f %%), %d underruns, %d late",
                         report.packets, talker, report.seconds, report.decodedFrames, report.redundancyRecoveredFrames, report.fecRecoveredFrames,
                         report.fecRecoveredPercent, report.concealedFrames, report.concealedPercent, report.underruns, report.latePackets))
            print("playback started at \(start) ns (CLOCK_MONOTONIC); wrote \(out)")
        }
    }

    /// An operation as one CSV field: its name, and for a time-stretch its pace and most samples.
    static func label(_ operation: PlayoutOperation) -> String {
        switch operation {
        case let .accelerate(maximum, pace): return "accelerate:\(pace):\(maximum)"
        case let .preemptiveExpand(maximum, quietOnly): return "preemptiveExpand:\(quietOnly ? "quietOnly" : "voiced"):\(maximum)"
        default: return "\(operation)"
        }
    }
}
