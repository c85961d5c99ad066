import ArgumentParser
import Foundation
import ParleyAudio
import ParleyClient
import ParleyNetSim
import ParleyWire

/// `parley-bench sender-protection`: what a listener can get back of a talker's speech
/// through a lossy path, for each way the sender can spend its bits (bitrate, in-band FEC,
/// RED redundancy), next to the ideal decoder's reference, in the same run.
///
/// Each option encodes the speech with Parley's own `VoiceEncoder` and `RTPPacketizer`
/// (20 ms frames, DTX unless asked otherwise), a seeded `LossModel` decides each packet's
/// fate, the packets that arrived are unwrapped as the client does (`IncomingFrames`) and
/// decoded offline with perfect knowledge (`IdealDecoder`): a frame's own packet, else a
/// redundant copy of it that came at most `wait` packets later, else in-band FEC from the
/// next frame's packet (or a copy of it), else concealment. The ideal reference is libopus
/// at 32 kb/s with FEC for 10 % loss and no DTX, decoded with FEC from N+1 only. Every
/// option sees the same packet fates for a seed. The speech is encoded
/// `--warmup-passes` times before the pass that is written, so an option that adapts to
/// loss reports is judged in a call that has been going on, as a listener would hear it.
///
/// Writes `original.wav` and one WAV per option and seed (48 kHz mono, aligned with the
/// original), and `summary.json`; `Benchmarks/sender-protection-report` scores them with
/// PESQ-WB and STOI.
struct SenderProtectionBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sender-protection",
        abstract: "Decode a talker's speech through seeded loss for each way of spending the sender's bits.",
        discussion: """
            An option is LABEL=KEY:VALUE,...: bitrate:KBPS (the voice), fec:PERCENT (expected
            loss; 0 turns FEC off), red:D+D (redundant copies D frames back), redrate:KBPS
            (redundancy as a second encoding at this rate instead of copies), dtx:on|off (on unless
            said), decoder:fec1
            (use only FEC from the next packet, as the ideal reference does), wait:FRAMES (a
            copy or FEC helps only if it comes at most this many packets after its frame), or
            adaptive (the call's EncoderAdaptation, fed simulated loss reports, with the voice
            at bitrate:KBPS, redundancy red:D+D and its memory:REPORTS and hold:SECONDS (of speech); with
            old-listener, as when a listener cannot read RED).
            Example:
              parley-bench sender-protection --loss bursts:10:3 --out /tmp/p \\
                  --option "ideal=bitrate:32,fec:10,decoder:fec1,dtx:off" --option "copies=bitrate:32,red:1+3,wait:3"
            """)

    @Option(help: ArgumentHelp("Speech to send (WAV, any rate); default: the recorded voices of alsa-utils.", valueName: "FILE.wav"))
    var speech: String?

    @Option(help: ArgumentHelp("The path's loss: none, random:PERCENT, or bursts:PERCENT:MEAN-LENGTH.", valueName: "spec"))
    var loss: String = "none"

    @Option(help: ArgumentHelp("Loss only in episodes: ON seconds of loss after OFF seconds without, repeated.", valueName: "ON:OFF"))
    var episodes: String?

    @Option(help: "Seeds to run (each a different set of packet fates).")
    var seeds: Int = 5

    @Option(help: "The first seed.")
    var firstSeed: UInt64 = 1

    @Option(help: "Passes of the speech sent before the one written (the adaptation's warm-up).")
    var warmupPasses: Int = 1

    @Option(name: .customLong("option"), help: ArgumentHelp("A way of sending (see above); repeat for several.", valueName: "LABEL=SPEC"))
    var options: [String] = []

    @Option(help: ArgumentHelp("Folder for the WAVs and summary.json.", valueName: "DIR"))
    var out: String

    struct Result: Codable {
        var label: String
        var seed: UInt64
        /// Payload bits per second while talking (per packet sent).
        var payloadKilobitsPerSecond: Double
        var lossPercent: Double
        var framesFromOwnPacket: Int
        var framesFromRedundancy: Int
        var framesFromFEC: Int
        var framesConcealed: Int
    }

    func validate() throws {
        guard (1...100).contains(seeds) else { throw ValidationError("--seeds must be 1–100") }
        guard (0...10).contains(warmupPasses) else { throw ValidationError("--warmup-passes must be 0–10") }
        guard !options.isEmpty else { throw ValidationError("give at least one --option LABEL=SPEC (see --help)") }
        _ = try LossSpecification(loss, episodes: episodes)
        for option in options { _ = try SendingOption(option) }
    }

    func run() throws {
        let voice = try speech.map { path in
            let audio = try WAVAudio(contentsOf: path)
            return try Resampler.resample(audio.mono, from: audio.sampleRate, to: AudioClock.sampleRate)
        } ?? AudioBenchmark.recordedVoices(gapMilliseconds: 300)
        let frame = OpusFrameDuration.ms20.samples
        let pass = (voice.count + frame - 1) / frame * frame
        let padded = voice + [Float](repeating: 0, count: pass - voice.count)
        let signal = [[Float]](repeating: padded, count: warmupPasses + 1).flatMap { $0 }
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        try WAVAudio(sampleRate: AudioClock.sampleRate, samples: padded).write(to: "\(out)/original.wav")

        let lossSpecification = try LossSpecification(loss, episodes: episodes)
        let sendingOptions = try options.map(SendingOption.init)
        var results: [Result] = []
        for seed in firstSeed..<firstSeed + UInt64(seeds) {
            for option in sendingOptions {
                var fates = lossSpecification.fates(seed: seed)
                let sent = try option.send(signal, fates: &fates)
                let decoded = try Self.decode(sent, onlyFECFromNext: option.onlyFECFromNext, wait: option.wait)
                let written = Array(decoded.audio[(signal.count - pass + sent.lookahead)...].prefix(pass))
                try WAVAudio(sampleRate: AudioClock.sampleRate, samples: written + [Float](repeating: 0, count: pass - written.count))
                    .write(to: "\(out)/\(option.label)-\(seed).wav")
                let scored = sent.packets.filter { $0.slot >= signal.count / frame - pass / frame }
                let bytes = scored.reduce(0) { $0 + $1.payloadCount }
                let lost = scored.filter(\.lost).count
                results.append(Result(
                    label: option.label, seed: seed,
                    payloadKilobitsPerSecond: Double(bytes * 8) / (Double(scored.count) * 0.02) / 1_000,
                    lossPercent: 100 * Double(lost) / Double(max(1, scored.count)),
                    framesFromOwnPacket: decoded.count(.decode), framesFromRedundancy: decoded.count(.redundancy),
                    framesFromFEC: decoded.count(.fec), framesConcealed: decoded.count(.conceal)))
                print(String(format: "%@ seed %llu: %.1f kb/s, loss %.1f %%, frames own %d, redundancy %d, FEC %d, concealed %d",
                             option.label, seed, results.last!.payloadKilobitsPerSecond, results.last!.lossPercent,
                             decoded.count(.decode), decoded.count(.redundancy), decoded.count(.fec), decoded.count(.conceal)))
            }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(results).write(to: URL(fileURLWithPath: "\(out)/summary.json"))
    }

    /// What a listener with perfect knowledge makes of what arrived: each frame's own packet,
    /// the first copy of it that came at most `wait` packets later (none with
    /// `onlyFECFromNext`), and whether FEC for it can come from the next frame's packet.
    static func decode(_ sent: SentStream, onlyFECFromNext: Bool, wait: Int) throws -> IdealDecoder.Output {
        var packets = [[UInt8]?](repeating: nil, count: sent.slots)
        var arrived = [Bool](repeating: true, count: sent.slots)
        var copies = [[UInt8]?](repeating: nil, count: sent.slots)
        var carriesFEC = [Bool](repeating: false, count: sent.slots)
        var position: [UInt16: Int] = [:]
        for (index, packet) in sent.packets.enumerated() {
            position[packet.sequenceNumber] = index
            arrived[packet.slot] = !packet.lost
            carriesFEC[packet.slot] = packet.carriesFEC
        }
        for (index, packet) in sent.packets.enumerated() {
            _ = try RTPPacketView.withParsed(packet.bytes) { view in
                IncomingFrames.forEach(in: view) { frame in
                    guard frame.isRedundant else {
                        packets[packet.slot] = Array(frame.payload)
                        return
                    }
                    guard !packet.lost, !onlyFECFromNext, let target = position[frame.sequenceNumber], target < index, index - target <= wait else { return }
                    let slot = sent.packets[target].slot
                    guard sent.packets[target].lost, copies[slot] == nil else { return }
                    copies[slot] = Array(frame.payload)
                    // A second encoding carries no FEC for the frame before, as its own packet did.
                    if packet.reencodesRedundancy { carriesFEC[slot] = false }
                }
            }
        }
        return try IdealDecoder.decode(packets: packets, arrived: arrived, copies: copies, carriesFEC: carriesFEC, frameSamples: sent.frameSamples)
    }
}

/// Which packets the path loses: a `LossModel`, optionally only in episodes.
struct LossSpecification {
    enum Kind { case none, random(Double), bursts(Double, Double) }
    let kind: Kind
    /// Frames of loss and of no loss, alternating (no loss first); nil: loss throughout.
    let episodes: (on: Int, off: Int)?

    init(_ text: String, episodes: String?) throws {
        let parts = text.split(separator: ":").map(String.init)
        switch parts.first {
        case "none" where parts.count == 1:
            kind = .none
        case "random" where parts.count == 2:
            guard let percent = Double(parts[1]), (0...100).contains(percent) else { throw ValidationError("--loss random:PERCENT needs 0–100, not \(parts[1])") }
            kind = .random(percent / 100)
        case "bursts" where parts.count == 3:
            guard let percent = Double(parts[1]), let burst = Double(parts[2]), LossModel.isPossible(rate: percent / 100, meanBurstLength: burst) else {
                throw ValidationError("--loss bursts:PERCENT:MEAN needs a loss that bursts of that mean length can give (at most MEAN/(MEAN+1))")
            }
            kind = .bursts(percent / 100, burst)
        default:
            throw ValidationError("--loss must be none, random:PERCENT or bursts:PERCENT:MEAN, not '\(text)'")
        }
        if let episodes {
            let values = episodes.split(separator: ":").compactMap { Double($0) }
            guard values.count == 2, values.allSatisfy({ $0 > 0 && $0 < 3_600 }) else {
                throw ValidationError("--episodes must be ON:OFF in seconds, like 4:10")
            }
            self.episodes = (Int(values[0] * 50), Int(values[1] * 50))
        } else {
            self.episodes = nil
        }
    }

    /// The fate of the packet sent in each frame slot, for one seed.
    struct Fates {
        var model: LossModel?
        let episodes: (on: Int, off: Int)?

        mutating func losesPacket(inSlot slot: Int) -> Bool {
            if let episodes, slot % (episodes.on + episodes.off) < episodes.off { return false }
            return model?.losesNextPacket() ?? false
        }
    }

    func fates(seed: UInt64) -> Fates {
        switch kind {
        case .none: return Fates(model: nil, episodes: episodes)
        case let .random(rate): return Fates(model: LossModel(rate: rate, seed: seed), episodes: episodes)
        case let .bursts(rate, burst): return Fates(model: LossModel(rate: rate, meanBurstLength: burst, seed: seed), episodes: episodes)
        }
    }
}
