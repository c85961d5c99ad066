import ArgumentParser
import ParleyClient
import Foundation
import ParleyAudio

/// `parley process`: the outgoing voice path (echo cancellation, residual echo and noise
/// suppression, optionally Opus) run offline on two recordings, printing what it measured.
/// Users tune their set-up with it; the echo tests run it too.
struct ProcessCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "process",
        abstract: "Run the outgoing voice path on recordings and report the echo it removed.",
        discussion: """
            MIC is what the microphone captured and FAR what the speaker played over the same \
            time (both WAV, 48 kHz, mono, starting together). OUT receives what Parley would \
            send: the microphone with the speaker's echo cancelled and noise suppressed, after \
            an Opus round trip when --opus is given. The playback-to-capture delay is measured \
            from the recordings unless --delay gives it.

            Example: record the far end and the microphone at once, then
              parley process --mic mic.wav --far far.wav --out sent.wav
            and listen to sent.wav. If echo remains, compare the reported delay with your \
            device's, and try --tail 300 for a reverberant room.
            """ + "\n\n" + ProcessExitStatus.helpText)

    enum Switch: String, ExpressibleByArgument, CaseIterable {
        case on, off
        var isOn: Bool { self == .on }
    }

    struct DelayArgument: ExpressibleByArgument {
        let delay: OutgoingProcessor.Delay

        init?(argument: String) {
            if argument == "auto" {
                delay = .automatic
            } else if let milliseconds = Int(argument) {
                delay = .fixed(milliseconds: milliseconds)
            } else {
                return nil
            }
        }

        var defaultValueDescription: String { "\(delay)" }
    }

    @Option(help: ArgumentHelp("What the microphone captured (WAV, 48 kHz mono).", valueName: "MIC.wav"))
    var mic: String

    @Option(help: ArgumentHelp("What the speaker played over the same time (WAV, 48 kHz mono).", valueName: "FAR.wav"))
    var far: String

    @Option(help: ArgumentHelp("Where to write what would be sent (16-bit WAV, 48 kHz mono).", valueName: "OUT.wav"))
    var out: String

    @Option(help: "Echo cancellation (off: only noise suppression runs, as with headphones).")
    var aec: Switch = .on

    @Option(help: ArgumentHelp("Echo tail in ms: the room reverberation the canceller models after the delay (20–1000).", valueName: "MS"))
    var tail: Int = 200

    @Option(help: ArgumentHelp("Playback-to-capture delay in ms (0–500), or auto to measure it.", valueName: "MS|auto"))
    var delay: DelayArgument = DelayArgument(argument: "auto")!

    @Option(help: "Noise suppression.")
    var denoise: Switch = .on

    @Option(help: ArgumentHelp("Opus bitrate in kb/s for a round trip through the codec (6–510).", valueName: "KBPS"))
    var opus: Int?

    func validate() throws {
        guard (20...1_000).contains(tail) else {
            throw ValidationError("--tail \(tail) is outside 20–1000 ms; 200 suits most rooms once the delay is measured.")
        }
        if case .fixed(let milliseconds) = delay.delay, !(0...500).contains(milliseconds) {
            throw ValidationError("--delay \(milliseconds) is outside 0–500 ms; use --delay auto to measure it.")
        }
        if let opus, !(6...510).contains(opus) {
            throw ValidationError("--opus \(opus) is outside 6–510 kb/s; voice sounds good from 24.")
        }
    }

    func run() throws {
        let micAudio = try load(mic, as: "MIC")
        let farAudio = try load(far, as: "FAR")
        let samples: (mic: [Float], far: [Float])
        do {
            samples = try OfflineOutgoingPath.validate(mic: micAudio, far: farAudio)
        } catch {
            fail("\(error)", status: .inputFile)
        }

        var options = OfflineOutgoingPath.Options()
        options.cancelEcho = aec.isOn
        options.tailMilliseconds = tail
        options.delay = delay.delay
        options.denoise = denoise.isOn
        options.opusBitrate = opus.map { $0 * 1_000 }
        let report = try OfflineOutgoingPath.run(mic: samples.mic, far: samples.far, options: options)

        do {
            try WAVAudio(sampleRate: AudioClock.sampleRate, samples: report.output).write(to: out)
        } catch {
            fail("\(error)", status: .outputFile)
        }
        print(Self.summary(report, options: options, duration: micAudio.duration, output: out))
    }

    static func summary(_ report: OfflineOutgoingPath.Report, options: OfflineOutgoingPath.Options, duration: Double, output: String) -> String {
        func format(_ value: Double, _ digits: Int = 1) -> String { String(format: "%.\(digits)f", value) }
        var lines = ["processed \(format(duration, 2)) s of audio"]
        if options.cancelEcho {
            lines.append("echo cancellation: on, tail \(options.tailMilliseconds) ms, delay \(options.delay)")
            if case .automatic = options.delay {
                if let estimated = report.estimatedDelayMilliseconds {
                    let first = report.firstEstimateSeconds.map { " (first estimate after \(format($0)) s)" } ?? ""
                    lines.append("estimated delay: \(format(estimated)) ms\(first); reference aligned at \(format(report.appliedDelayMilliseconds)) ms")
                } else {
                    lines.append("estimated delay: none found. The far end may be silent, its echo too weak, or the delay beyond 500 ms; give it with --delay MS.")
                }
            }
            if report.loudspeakerModels.isEmpty {
                lines.append("loudspeaker: linear (no clipping found)")
            } else {
                let models = report.loudspeakerModels.map { "\($0.model) after \(format($0.seconds)) s" }
                lines.append("loudspeaker: clips; reference modelled with \(models.joined(separator: ", then "))")
            }
        } else {
            lines.append("echo cancellation: off")
        }
        if let erle = report.erleDecibels {
            lines.append("ERLE after 5 s where the far end plays: \(format(erle)) dB over \(format(report.erleSeconds)) s (near-end speech in those parts lowers this figure)")
        } else {
            lines.append("ERLE: not measured (the far end does not play after the first 5 s)")
        }
        lines.append("noise suppression: \(options.denoise ? "on" : "off"); voice in \(Int((report.voiceFraction * 100).rounded())) % of frames")
        if let bitrate = options.opusBitrate { lines.append("Opus round trip at \(bitrate / 1_000) kb/s") }
        lines.append("wrote \(output)")
        return lines.joined(separator: "\n")
    }

    private func load(_ path: String, as name: String) throws -> WAVAudio {
        do {
            return try WAVAudio(contentsOf: path)
        } catch {
            if case .cannotOpen = error { fail("\(name) \(error)", status: .inputFile) }
            fail("\(name) (\(path)): \(error)", status: .inputFile)
        }
    }

    private func fail(_ message: String, status: ProcessExitStatus) -> Never {
        FileHandle.standardError.write(Data("parley process: error: \(message)\n".utf8))
        Foundation.exit(status.rawValue)
    }
}
