import ArgumentParser
import Foundation
import ParleyAudio
import ParleyClient

/// `parley-bench ideal-decoder`: the ceiling a listener's audio is judged against, from
/// one call's files. The talker's `--record-sent` (what it handed its encoder) goes through
/// a reference libopus encoder (the call's bitrate ceiling, in-band FEC, 10 % expected
/// loss, VOIP, 20 ms), and is decoded offline with the listener's packet fates and perfect
/// knowledge (`IdealDecoder`); and once more with nothing lost (the codec's ceiling).
///
/// The fates come from the two `--packet-trace`s: a frame is lost when the talker sent a
/// packet for it and the listener's trace has no packet of the talker's SSRC with that RTP
/// timestamp. A frame the talker never sent (DTX silence, or before it joined) counts as
/// received: the reference encoding has no DTX, and nothing of it was lost on the way.
struct IdealDecoderCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ideal-decoder",
        abstract: "Decode what a talker said as an ideal receiver would, with a listener's packet fates.",
        discussion: """
            Example, after a call with --record-sent and --packet-trace on both sides:
              parley-bench ideal-decoder --sent talker-sent.wav --sender-trace talker.csv \\
                  --receiver-trace listener.csv --ideal-out ideal.wav --ceiling-out ceiling.wav --json

            Both outputs are aligned sample for sample with --sent.
            """)

    @Option(help: ArgumentHelp("The talker's --record-sent recording (48 kHz mono).", valueName: "FILE.wav"))
    var sent: String

    @Option(help: ArgumentHelp("The talker's --packet-trace (its sent packets place each frame in --sent).", valueName: "FILE.csv"))
    var senderTrace: String

    @Option(help: ArgumentHelp("The listener's --packet-trace (which of the talker's packets arrived).", valueName: "FILE.csv"))
    var receiverTrace: String

    @Option(help: ArgumentHelp("The reference encoder's bitrate, kb/s: the call's --bitrate.", valueName: "kbps"))
    var bitrate: Double = 32

    @Option(help: ArgumentHelp("The loss the reference encoder protects against, percent.", valueName: "percent"))
    var expectedLoss: Int = 10

    @Option(help: ArgumentHelp("Write the ideal decoder's output here.", valueName: "FILE.wav"))
    var idealOut: String?

    @Option(help: ArgumentHelp("Write the codec's ceiling (nothing lost) here.", valueName: "FILE.wav"))
    var ceilingOut: String?

    @Flag(help: "Print one JSON object instead of text.")
    var json = false

    struct Report: Codable {
        /// 20 ms frames in the recording, and those the talker sent.
        var frames: Int
        var sentFrames: Int
        /// Sent frames the listener never got, percent of the sent ones.
        var lostFrames: Int
        var lossPercent: Double
        /// How the ideal receiver repaired them, percent of the sent frames.
        var fecFrames: Int
        var fecPercent: Double
        var concealedFrames: Int
        var concealedPercent: Double
        /// The longest run of consecutive lost frames.
        var longestLossRun: Int
    }

    func validate() throws {
        guard bitrate.isFinite, (6...510).contains(bitrate) else { throw ValidationError("--bitrate \(bitrate) is outside 6–510 kb/s.") }
        guard (0...100).contains(expectedLoss) else { throw ValidationError("--expected-loss \(expectedLoss) is outside 0–100 %.") }
    }

    func run() throws {
        let recording = try WAVAudio(contentsOf: sent)
        guard recording.sampleRate == AudioClock.sampleRate else {
            throw ValidationError("\(sent) runs at \(recording.sampleRate) Hz; give the talker's --record-sent (48 kHz).")
        }
        let signal = recording.mono
        let fates = try PacketFates(
            senderTrace: PacketTrace.read(contentsOf: senderTrace), receiverTrace: PacketTrace.read(contentsOf: receiverTrace),
            frameSamples: 960, frames: (signal.count + 959) / 960)
        guard fates.sentFrames > 0 else {
            throw ValidationError("\(senderTrace) has no sent packets: was it the talker's --packet-trace?")
        }

        var encoder = OpusEncoder.Configuration()
        encoder.application = .voip
        encoder.bitrate = Int((bitrate * 1_000).rounded())
        encoder.inbandFEC = true
        encoder.expectedLossPercent = expectedLoss
        encoder.dtx = false
        let ideal = try IdealDecoder.run(signal: signal, arrived: fates.arrived, configuration: encoder)
        if let idealOut { try WAVAudio(sampleRate: AudioClock.sampleRate, samples: ideal.audio).write(to: idealOut) }
        if let ceilingOut {
            let ceiling = try IdealDecoder.run(signal: signal, arrived: [], configuration: encoder)
            try WAVAudio(sampleRate: AudioClock.sampleRate, samples: ceiling.audio).write(to: ceilingOut)
        }

        func percent(_ count: Int) -> Double { 100 * Double(count) / Double(fates.sentFrames) }
        let fec = ideal.count(.fec)
        let concealed = ideal.count(.conceal)
        let report = Report(
            frames: ideal.repairs.count, sentFrames: fates.sentFrames, lostFrames: fates.lostFrames,
            lossPercent: percent(fates.lostFrames), fecFrames: fec, fecPercent: percent(fec),
            concealedFrames: concealed, concealedPercent: percent(concealed), longestLossRun: fates.longestLossRun)
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            print(String(decoding: try encoder.encode(report), as: UTF8.self))
        } else {
            print(String(format: "%d of %d sent frames lost (%.1f %%, longest run %d): the ideal receiver rebuilds %d from FEC (%.1f %%) and conceals %d (%.1f %%)",
                         report.lostFrames, report.sentFrames, report.lossPercent, report.longestLossRun,
                         fec, report.fecPercent, concealed, report.concealedPercent))
        }
    }
}
