import ArgumentParser
import Foundation
import ParleyAudio
import ParleyClient

/// `parley-bench ideal-decoder`: the ceilings a listener's audio is judged against, from
/// one call's files, all aligned sample for sample with the talker's `--record-sent`:
///
/// - `--ideal-out`: what the talker handed its encoder, through a reference libopus encoder
///   (the call's bitrate ceiling, in-band FEC, 10 % expected loss, VOIP, 20 ms, no DTX),
///   decoded offline with the listener's packet fates and perfect knowledge
///   (`IdealDecoder`): the best sender and receiver together could do on that path.
/// - `--ceiling-out`: the same reference encoding with nothing lost.
/// - `--oracle-out`: the oracle receiver: the packets the talker really sent, as they
///   reached the listener (redundant copies and in-band FEC and all), each frame from the
///   best source that arrived at any time (its own packet, else a copy, else the next
///   frame's FEC, else concealment), with no deadline: the best any receiver could do with
///   this sender on this path. A listener's playout is judged against it.
/// - `--sent-out`: the talker's packets with nothing lost: what this sender delivers.
///
/// The fates come from the two `--packet-trace`s (`PacketFates`).
struct IdealDecoderCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ideal-decoder",
        abstract: "Decode what a talker said as ideal receivers would, with a listener's packet fates.",
        discussion: """
            Example, after a call with --record-sent and --packet-trace on both sides:
              parley-bench ideal-decoder --sent talker-sent.wav --sender-trace talker.csv \\
                  --receiver-trace listener.csv --ideal-out ideal.wav --oracle-out oracle.wav --json
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

    @Option(help: ArgumentHelp("The reference encoding, decoded with the listener's fates.", valueName: "FILE.wav"))
    var idealOut: String?

    @Option(help: ArgumentHelp("The reference encoding, nothing lost.", valueName: "FILE.wav"))
    var ceilingOut: String?

    @Option(help: ArgumentHelp("The oracle receiver: the talker's own packets as the listener got them, no deadline.", valueName: "FILE.wav"))
    var oracleOut: String?

    @Option(help: ArgumentHelp("The talker's own packets, nothing lost.", valueName: "FILE.wav"))
    var sentOut: String?

    @Flag(help: "Print one JSON object instead of text.")
    var json = false

    struct Report: Codable {
        /// 20 ms frames in the recording, and those the talker sent.
        var frames: Int
        var sentFrames: Int
        /// Sent frames the listener never got, percent of the sent ones.
        var lostFrames: Int
        var lossPercent: Double
        /// How the ideal decoder repaired the reference encoding, percent of the sent frames.
        var fecFrames: Int
        var fecPercent: Double
        var concealedFrames: Int
        var concealedPercent: Double
        /// How the oracle receiver repaired the talker's own packets. Their FEC is what the
        /// talker's encoder put in: a frame counted as rebuilt whose next packet carries none
        /// was concealed by libopus.
        var oracleRedundancyPercent: Double
        var oracleFECPercent: Double
        var oracleConcealedPercent: Double
        /// What the talker sent: RTP payload (Opus, or RED around it) per packet sent, as
        /// kilobits per second of the 20 ms it carries; over the whole recording, per second
        /// of it; and the share of its packets that carried redundant copies.
        var sentPayloadKilobitsPerSecond: Double
        var sentAverageKilobitsPerSecond: Double
        var redundantPacketPercent: Double
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
        let frameSamples = OpusFrameDuration.ms20.samples
        let fates = try PacketFates(
            senderTrace: PacketTrace.read(contentsOf: senderTrace), receiverTrace: PacketTrace.read(contentsOf: receiverTrace),
            frameSamples: frameSamples, frames: (signal.count + frameSamples - 1) / frameSamples)
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
        try write(ideal.audio, to: idealOut)
        if let ceilingOut { try write(IdealDecoder.run(signal: signal, arrived: [], configuration: encoder).audio, to: ceilingOut) }

        // The talker's encoder is a VOIP one at 48 kHz like the reference: the same look-ahead.
        let lookahead = try OpusEncoder(OpusEncoder.Configuration()).lookahead
        func inStep(_ audio: [Float]) -> [Float] {
            (0..<signal.count).map { $0 + lookahead < audio.count ? audio[$0 + lookahead] : 0 }
        }
        let padded = fates.payloads + [nil]  // the look-ahead's worth past the end
        let oracle = try IdealDecoder.decode(packets: padded, arrived: fates.arrived, copies: fates.copies, frameSamples: frameSamples)
        if oracleOut != nil { try write(inStep(oracle.audio), to: oracleOut) }
        if sentOut != nil { try write(inStep(IdealDecoder.decode(packets: padded, arrived: [], frameSamples: frameSamples).audio), to: sentOut) }

        func percent(_ count: Int) -> Double { 100 * Double(count) / Double(fates.sentFrames) }
        let report = Report(
            frames: ideal.repairs.count, sentFrames: fates.sentFrames, lostFrames: fates.lostFrames,
            lossPercent: percent(fates.lostFrames), fecFrames: ideal.count(.fec), fecPercent: percent(ideal.count(.fec)),
            concealedFrames: ideal.count(.conceal), concealedPercent: percent(ideal.count(.conceal)),
            oracleRedundancyPercent: percent(oracle.count(.redundancy)),
            oracleFECPercent: percent(oracle.count(.fec)), oracleConcealedPercent: percent(oracle.count(.conceal)),
            sentPayloadKilobitsPerSecond: fates.payloadKilobitsPerSecond,
            sentAverageKilobitsPerSecond: Double(fates.payloadBytes * 8) / (Double(signal.count) / Double(AudioClock.sampleRate)) / 1_000,
            redundantPacketPercent: percent(fates.redundantPackets),
            longestLossRun: fates.longestLossRun)
        if json {
            try printJSON(report)
        } else {
            print(String(format: "%d of %d sent frames lost (%.1f %%, longest run %d): the ideal decoder rebuilds %.1f %% from FEC and conceals %.1f %%; the oracle receiver plays %.1f %% from copies, rebuilds %.1f %% from FEC and conceals %.1f %%; the talker sent %.1f kb/s of payload while talking",
                         report.lostFrames, report.sentFrames, report.lossPercent, report.longestLossRun, report.fecPercent, report.concealedPercent,
                         report.oracleRedundancyPercent, report.oracleFECPercent, report.oracleConcealedPercent, report.sentPayloadKilobitsPerSecond))
        }
    }

    private func write(_ samples: [Float], to path: String?) throws {
        guard let path else { return }
        try WAVAudio(sampleRate: AudioClock.sampleRate, samples: samples).write(to: path)
    }
}
