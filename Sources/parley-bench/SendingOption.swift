import ArgumentParser
import ParleyAudio
import ParleyClient
import ParleyNetSim
import ParleyWire

/// One way of sending, for `parley-bench sender-protection`: a fixed encoder setting, or
/// the call's `EncoderAdaptation` fed the loss reports a relay would send; and the rules
/// its listener decodes by.
struct SendingOption {
    let label: String
    /// nil: adaptive.
    let setting: EncoderAdaptation.Setting?
    let adaptation: EncoderAdaptation.Configuration
    let onlyFECFromNext: Bool
    let wait: Int
    let dtx: Bool
    /// For an adaptive option: whether every listener reads RED (else FEC protects instead).
    let listenersReadRedundancy: Bool

    init(_ text: String) throws {
        guard let equals = text.firstIndex(of: "="), !text[..<equals].isEmpty else {
            throw ValidationError("an option is LABEL=SPEC, like red2=bitrate:32,fec:10,red:1+2; not '\(text)'")
        }
        label = String(text[..<equals])
        guard label.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." }) else {
            throw ValidationError("option label '\(label)' becomes a file name: use letters, digits, - _ .")
        }
        var bitrate = 32_000
        var fec = 0
        var distances: [Int] = []
        var redundantBitrate: Int?
        var adaptive = false
        var onlyFEC = false
        var wait = Int.max
        var dtx = true
        var listenersReadRedundancy = true
        var adaptation = EncoderAdaptation.Configuration()
        for item in text[text.index(after: equals)...].split(separator: ",") {
            let parts = item.split(separator: ":", maxSplits: 1).map(String.init)
            let value = parts.count == 2 ? parts[1] : ""
            switch parts[0] {
            case "bitrate":
                guard let kbps = Double(value), (6...510).contains(kbps) else { throw ValidationError("\(label): bitrate is 6–510 kb/s") }
                bitrate = Int(kbps * 1_000)
            case "fec":
                guard let percent = Int(value), (0...100).contains(percent) else { throw ValidationError("\(label): fec is 0–100 %") }
                fec = percent
            case "red":
                distances = value.split(separator: "+").compactMap { Int($0) }
                guard !distances.isEmpty, distances.allSatisfy({ (1...VoiceEncoder.maximumDistance).contains($0) }) else {
                    throw ValidationError("\(label): red is distances 1–\(VoiceEncoder.maximumDistance) joined by +, like 1+2")
                }
            case "redrate":
                guard let kbps = Double(value), (6...510).contains(kbps) else { throw ValidationError("\(label): redrate is 6–510 kb/s") }
                redundantBitrate = Int(kbps * 1_000)
            case "decoder":
                guard value == "fec1" else { throw ValidationError("\(label): the only decoder rule to ask for is fec1") }
                onlyFEC = true
            case "wait":
                guard let frames = Int(value), frames >= 1 else { throw ValidationError("\(label): wait is a number of frames, at least 1") }
                wait = frames
            case "dtx":
                guard value == "on" || value == "off" else { throw ValidationError("\(label): dtx is on or off") }
                dtx = value == "on"
            case "adaptive":
                adaptive = true
            case "old-listener":
                listenersReadRedundancy = false
            case "memory":
                guard let reports = Int(value), (1...60).contains(reports) else { throw ValidationError("\(label): memory is 1–60 reports") }
                adaptation.memory = reports
            case "hold":
                // Seconds of speech: 50 packets each.
                guard let seconds = Int(value), (0...600).contains(seconds) else { throw ValidationError("\(label): hold is 0–600 seconds of speech") }
                adaptation.redundancyHoldPackets = seconds * 50
            default:
                throw ValidationError("\(label): unknown key '\(parts[0])' (bitrate, fec, red, redrate, dtx, decoder, wait, adaptive, memory, hold, old-listener)")
            }
        }
        adaptation.maximumBitrate = bitrate
        if !distances.isEmpty { adaptation.redundancy = .init(distances: distances.sorted(), bitrate: redundantBitrate) }
        self.adaptation = adaptation
        setting = adaptive ? nil : EncoderAdaptation.Setting(
            bitrate: bitrate, expectedLossPercent: fec, redundancy: .init(distances: distances.sorted(), bitrate: redundantBitrate))
        onlyFECFromNext = onlyFEC
        self.wait = wait
        self.dtx = dtx
        self.listenersReadRedundancy = listenersReadRedundancy
    }

    /// Encodes and packetises `signal` as a Parley sender would, deciding each packet's fate.
    func send(_ signal: [Float], fates: inout LossSpecification.Fates) throws -> SentStream {
        var adaptation = EncoderAdaptation(self.adaptation)
        _ = adaptation.listeners(allReadRedundancy: listenersReadRedundancy)
        var opus = OpusEncoder.Configuration()
        opus.dtx = dtx
        let encoder = try VoiceEncoder(encoder: OpusEncoder(opus), setting: setting ?? adaptation.setting)
        let lookahead = try OpusEncoder(opus).lookahead
        var packetizer = RTPPacketizer(ssrc: 0x5EED, initialSequenceNumber: 65_000, initialTimestamp: 4_294_000_000)
        var reports = LossReportSimulation()
        var payload = [UInt8](repeating: 0, count: VoiceEncoder.maximumPayloadSize)
        var packet = [UInt8](repeating: 0, count: RTPPacketizer.maximumPacketSize)
        var packets: [SentPacket] = []
        let frame = encoder.frameSamples
        for slot in 0..<signal.count / frame {
            if setting == nil, let report = reports.due(slot: slot), let next = adaptation.report(lossFraction: report.fraction, packets: report.packets) {
                try encoder.apply(next)
            }
            let output = try signal.withUnsafeBufferPointer { samples in
                try payload.withUnsafeMutableBytes { try encoder.encode(UnsafeBufferPointer(rebasing: samples[slot * frame..<(slot + 1) * frame]), into: $0) }
            }
            guard case let .payload(payloadType, count) = output else {
                packetizer.skipSilence(samples: frame)
                continue
            }
            let sequenceNumber = packetizer.nextSequenceNumber
            let size = try payload.withUnsafeBytes { bytes in
                try packet.withUnsafeMutableBytes {
                    try packetizer.packetize(
                        payload: UnsafeRawBufferPointer(rebasing: bytes[0..<count]), payloadType: payloadType, samples: frame,
                        level: AudioLevel(voiceActivity: true, level: 30), into: $0)
                }
            }
            let lost = fates.losesPacket(inSlot: slot)
            reports.record(slot: slot, lost: lost)
            packets.append(SentPacket(
                slot: slot, sequenceNumber: sequenceNumber, bytes: Array(packet.prefix(size)), payloadCount: count, lost: lost,
                carriesFEC: encoder.setting.expectedLossPercent > 0, reencodesRedundancy: encoder.setting.redundancy.bitrate != nil))
        }
        return SentStream(packets: packets, slots: signal.count / frame, frameSamples: frame, lookahead: lookahead)
    }
}

struct SentPacket {
    /// The frame slot (20 ms of the timeline) the packet's primary frame fills.
    var slot: Int
    var sequenceNumber: UInt16
    /// The whole RTP packet.
    var bytes: [UInt8]
    var payloadCount: Int
    var lost: Bool
    /// Whether its Opus frame was encoded with in-band FEC for the frame before.
    var carriesFEC: Bool
    /// Whether its redundant blocks are a second encoding (without FEC) rather than copies.
    var reencodesRedundancy: Bool
}

struct SentStream {
    var packets: [SentPacket]
    var slots: Int
    var frameSamples: Int
    var lookahead: Int
}

/// The loss reports a sender gets: about once a second (0.5–1.5 s, as RFC 3550 spreads
/// them), each the fraction of the interval's packets lost, arriving 60 ms after the
/// interval ends (a round trip and the relay's turn).
struct LossReportSimulation {
    private var sent = 0
    private var lost = 0
    private var nextReport = 25
    private var pending: [(due: Int, fraction: Double, packets: Int)] = []
    private var random = SeededRandom(seed: 0x5245_504F)
    static let delaySlots = 3

    mutating func record(slot: Int, lost isLost: Bool) {
        sent += 1
        if isLost { lost += 1 }
    }

    /// The fraction lost of a report that arrives at `slot`, and how many packets it
    /// covers, if one does.
    mutating func due(slot: Int) -> (fraction: Double, packets: Int)? {
        if slot >= nextReport {
            if sent > 0 { pending.append((slot + Self.delaySlots, Double(lost) / Double(sent), sent)) }
            sent = 0
            lost = 0
            nextReport = slot + 25 + Int(random.next() % 51)
        }
        guard let first = pending.first, first.due <= slot else { return nil }
        pending.removeFirst()
        return (first.fraction, first.packets)
    }
}
