import ParleyBasics
import Foundation
import ParleyAudio
@testable import ParleyClient
import ParleyWire
import Testing

/// What a listener hears of a burst of lost packets, through the real send path
/// (`VoiceEncoder`, `RTPPacketizer`) and receive path (`RemoteSpeaker` unwrapping RED into
/// its jitter buffer), against what the same path plays when nothing is lost.
@Suite("Rebuilding a burst from redundancy")
struct RedundancyRecoveryTests {
    /// 20 ms frames of recorded human speech.
    static let speech: [Float] = {
        let audio = try! WAVAudio(contentsOf: "/usr/share/sounds/alsa/Front_Center.wav")
        return Array(audio.mono.prefix(audio.mono.count / 960 * 960))
    }()

    /// The three loudest consecutive frames: the burst falls in the middle of a word.
    static let burst: Range<Int> = {
        let energies = (0..<speech.count / 960).map { frame in speech[frame * 960..<(frame + 1) * 960].reduce(0) { $0 + $1 * $1 } }
        let start = (0..<energies.count - 2).max { energies[$0..<$0 + 3].reduce(0, +) < energies[$1..<$1 + 3].reduce(0, +) }!
        return start..<start + 3
    }()

    struct Heard {
        var audio: [Float]
        var statistics: JitterBufferStatistics
        /// The frames whose packet (plain Opus) carries in-band FEC of the frame before.
        var carryFEC: Set<Int> = []
    }

    /// Sends the speech with `setting`, loses the packets of `lost` frames, and plays what
    /// arrives (30 ms after sending, in order) as a listener's client would.
    static func listen(setting: EncoderAdaptation.Setting, lost: Set<Int>) throws -> Heard {
        var configuration = OpusEncoder.Configuration()
        configuration.dtx = true
        let encoder = try VoiceEncoder(encoder: OpusEncoder(configuration), setting: setting)
        var packetizer = RTPPacketizer(ssrc: 0xA11CE, initialSequenceNumber: 65_534, initialTimestamp: 4_294_967_000)
        let speaker = try RemoteSpeaker(ssrc: 0xA11CE, identity: "alice", configuration: JitterBuffer.Configuration(), now: 0)
        var payload = [UInt8](repeating: 0, count: VoiceEncoder.maximumPayloadSize)
        var packet = [UInt8](repeating: 0, count: RTPPacketizer.maximumPacketSize)
        var heard: [Float] = []
        var carryFEC: Set<Int> = []
        var chunk = [Float](repeating: 0, count: 480)
        let frames = speech.count / 960
        for tick in 0..<(frames + 15) * 2 {
            let now = Double(tick) * 0.010
            // A frame is sent every 20 ms and arrives 30 ms later.
            if tick % 2 == 1, case let frame = (tick - 3) / 2, frame >= 0, frame < frames {
                let output = try speech.withUnsafeBufferPointer { samples in
                    try payload.withUnsafeMutableBytes { try encoder.encode(UnsafeBufferPointer(rebasing: samples[frame * 960..<(frame + 1) * 960]), into: $0) }
                }
                if case let .payload(payloadType, count) = output {
                    if payloadType == RTPHeader.opusPayloadType, payload.withUnsafeBytes({ OpusInBandFEC.isCarried(by: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }) {
                        carryFEC.insert(frame)
                    }
                    let size = try payload.withUnsafeBytes { bytes in
                        try packet.withUnsafeMutableBytes {
                            try packetizer.packetize(
                                payload: UnsafeRawBufferPointer(rebasing: bytes[0..<count]), payloadType: payloadType, samples: 960,
                                level: AudioLevel(voiceActivity: true, level: 20), into: $0)
                        }
                    }
                    if !lost.contains(frame) {
                        try RTPPacketView.withParsed(Array(packet.prefix(size))) { view in
                            speaker.receive(view, now: UInt64(now * 1e9), seconds: now)
                        }
                    }
                } else {
                    packetizer.skipSilence(samples: 960)
                }
            }
            chunk.withUnsafeMutableBufferPointer { _ = speaker.buffer.read(into: $0, now: now) }
            heard += chunk
        }
        return Heard(audio: heard, statistics: speaker.buffer.statistics, carryFEC: carryFEC)
    }

    /// How alike two playouts are over the burst's frames (with a margin of one frame each
    /// side), at the best alignment from 5 ms earlier to 100 ms later (the buffer makes room for the copies
    /// after the first loss, so the burst plays later than in the lossless playout): 1 is
    /// identical.
    static func match(_ heard: [Float], _ reference: [Float], delay: Int) -> Double {
        let start = delay + (burst.lowerBound - 1) * 960, end = delay + (burst.upperBound + 1) * 960
        let expected = Array(reference[start..<end])
        return (-240...4_800).map { lag in
            var xy = 0.0, xx = 0.0, yy = 0.0
            for index in 0..<expected.count {
                let x = Double(expected[index]), y = Double(heard[start + lag + index])
                xy += x * y
                xx += x * x
                yy += y * y
            }
            return xx > 0 && yy > 0 ? xy / (xx * yy).squareRoot() : 0
        }.max()!
    }

    /// Where the speech starts in a playout: the delay the listener's buffer added.
    static func playoutDelay(_ heard: [Float]) -> Int {
        let first = speech.firstIndex { abs($0) > 0.01 }!
        return heard.firstIndex { abs($0) > 0.01 }! - first
    }

    @Test func aBurstOfThreeLostPacketsIsRebuiltFromTheCopiesInTheNextPackets() throws {
        // What the sender sends while loss is reported: copies of the frames 1 and 3 back.
        let protected = EncoderAdaptation.Setting(bitrate: 32_000, expectedLossPercent: 0, redundancy: .init(distances: [1, 3]))
        // The sender sends copies because loss was reported: a lone packet was lost earlier,
        // and the listener's buffer has made room for the copies since.
        let lost = Set(Self.burst).union([Self.burst.lowerBound - 25])
        let reference = try Self.listen(setting: protected, lost: [])
        let delay = Self.playoutDelay(reference.audio)
        let withRedundancy = try Self.listen(setting: protected, lost: lost)
        let fecOnly = try Self.listen(setting: .init(bitrate: 32_000, expectedLossPercent: 10), lost: lost)
        let unprotected = try Self.listen(setting: .init(bitrate: 32_000, expectedLossPercent: 0), lost: lost)

        let red = Self.match(withRedundancy.audio, reference.audio, delay: delay)
        let fec = Self.match(fecOnly.audio, reference.audio, delay: delay)
        let none = Self.match(unprotected.audio, reference.audio, delay: delay)
        print("burst of 3 at frames \(Self.burst): match with the lossless playout: RED \(red), FEC only \(fec), unprotected \(none)")
        // Every frame of the burst is an exact copy (the first and second from the two packets
        // after it, 3 back; the third from the next, 1 back): the listener hears what was sent.
        #expect(red > 0.95)
        #expect(red > fec + 0.2 && red > none + 0.2)
        #expect(withRedundancy.statistics.redundancyRecovered == 4 && withRedundancy.statistics.fecRecovered == 0)
        #expect(withRedundancy.statistics.concealedFrames == 0)
        // FEC alone rebuilds a lost frame only from a next packet that carries it: the burst's
        // last frame, and the lone one only if the encoder coded FEC for it (libopus protects
        // no frame as quiet as this one, a word's fading tail); the rest is concealed.
        let rebuildable = lost.filter { !lost.contains($0 + 1) && fecOnly.carryFEC.contains($0 + 1) }
        #expect(rebuildable.contains(Self.burst.upperBound - 1))
        #expect(fecOnly.statistics.fecRecovered == rebuildable.count)
        #expect(fecOnly.statistics.concealedFrames == lost.count - rebuildable.count)
        // Copies that were not needed (every packet repeats the two before it) are neither
        // late nor duplicates, and the frames that did arrive all played from their own packet.
        #expect(withRedundancy.statistics.late == 0 && withRedundancy.statistics.duplicates == 0)
        #expect(withRedundancy.statistics.decodedFrames == reference.statistics.decodedFrames - 4)
    }
}

/// A peer controls every field of a RED payload: offsets, lengths, payload types, and the
/// primary's sequence number. None of it may trap or play a copy anywhere but a hole.
@Suite("Hostile redundant audio")
struct HostileRedundancyTests {
    @Test func anyRedPayloadIsUnwrappedOrRejectedWithoutATrap() throws {
        var random = SplitMix64(seed: 0x5245_4448_4F53)
        let speaker = try RemoteSpeaker(ssrc: 7, identity: nil, configuration: JitterBuffer.Configuration(), now: 0)
        var chunk = [Float](repeating: 0, count: 480)
        var unwrapped = 0
        for index in 0..<5_000 {
            let blocks = (0..<Int.random(in: 0...6, using: &random)).map { _ in
                OwnedREDPayload.Block(
                    payloadType: Bool.random(using: &random) ? 111 : UInt8.random(in: 0...127, using: &random),
                    timestampOffset: [960, 1_920, 2_880, 0, 1, 16_383, UInt16.random(in: 0...16_383, using: &random)].randomElement(using: &random)!,
                    data: (0..<Int.random(in: 0...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) })
            }
            let primary = OwnedREDPayload.Block(
                payloadType: Bool.random(using: &random) ? 111 : 5, timestampOffset: 0,
                data: (0..<Int.random(in: 0...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) })
            var payload = try OwnedREDPayload(redundant: blocks, primary: primary).serialized()
            if Bool.random(using: &random), !payload.isEmpty {
                payload.removeLast(Int.random(in: 1...payload.count, using: &random))  // cut short
            }
            let header = RTPHeader(
                payloadType: RTPHeader.redPayloadType, sequenceNumber: UInt16.random(in: 0...UInt16.max, using: &random),
                timestamp: UInt32.random(in: 0...UInt32.max, using: &random), ssrc: 7)
            try RTPPacketView.withParsed(try header.serialized(payload: payload)) { view in
                if IncomingFrames.forEach(in: view, { _ in }) { unwrapped += 1 }
                speaker.receive(view, now: UInt64(index) * 20_000_000, seconds: Double(index) * 0.02)
            }
            chunk.withUnsafeMutableBufferPointer { _ = speaker.buffer.read(into: $0, now: Double(index) * 0.02) }
        }
        #expect(unwrapped > 500, "the generator reaches the unwrapping path")
    }
}
