import Foundation
import ParleyAudio
import ParleyDevices
@testable import ParleyClient
import ParleyWire
import Synchronization
import Testing

/// What the others hear of a member who mutes or uses push-to-talk: the real capture
/// pipeline (Opus, RTP) fed a tone, its packets played by a listener's jitter buffer and
/// mix at the times they were captured.
@Suite("Mute and push-to-talk on the wire")
struct MuteOnTheWireTests {
    /// A microphone hearing a steady 440 Hz tone, which runs `actions` when its capture
    /// reaches each given sample (as a person presses a key mid-sentence), then ends.
    final class ScriptedTone: AudioInput, @unchecked Sendable {
        // @unchecked: read by the capture thread only.
        let sampleRate = 48_000
        let channels = 1
        let periodFrames = 480
        let xruns = 0
        private let total: Int
        private var position = 0
        private var actions: [(at: Int, run: () -> Void)]

        init(seconds: Double, actions: [(seconds: Double, run: () -> Void)]) {
            total = Int(seconds * 48_000)
            self.actions = actions.map { (Int($0.seconds * 48_000), $0.run) }.sorted { $0.0 < $1.0 }
        }

        func read(into output: UnsafeMutableBufferPointer<Float>) throws(DeviceError) -> Int {
            while let next = actions.first, next.at <= position {
                next.run()
                actions.removeFirst()
            }
            let count = min(output.count, total - position)
            for index in 0..<count { output[index] = 0.3 * Float(sin(Double(position + index) * 2 * Double.pi * 440 / 48_000)) }
            position += count
            return count
        }
    }

    /// Runs the capture pipeline over the input; returns the packets it sent.
    static func send(_ input: ScriptedTone, gate: MediaGate) throws -> [[UInt8]] {
        gate.update {
            $0.open = true
            $0.ssrc = 0x5EED
        }
        let sent = Mutex<[[UInt8]]>([])
        var opus = OpusEncoder.Configuration()
        opus.dtx = true
        let setting = gate.snapshot.encoder
        let pipeline = CapturePipeline(
            input: input, processor: nil, encoder: try VoiceEncoder(encoder: OpusEncoder(opus), setting: setting), ssrc: 0x5EED,
            raw: nil, sent: nil, trace: nil, tap: EchoReferenceTap(), silenceAfterInput: false, gate: gate, status: CallStatus(initialBitrate: setting.bitrate),
            send: { bytes in sent.withLock { $0.append(Array(bytes)) }; return true })
        try pipeline.run(stop: StopFlag())
        return sent.withLock { $0 }
    }

    /// What a listener hears of `packets`, each arriving 20 ms after its capture (a steady
    /// network), read 10 ms at a time: one sample a capture sample, on the sender's timeline.
    /// - Parameter firstSentAt: when, in the capture, the first packet's frame began.
    static func heard(_ packets: [[UInt8]], firstSentAt: Double = 0, seconds: Double) throws -> [Float] {
        let mix = PlaybackMix(recordingDirectory: nil)
        let buffer = try SharedJitterBuffer(JitterBuffer.Configuration())
        mix.add(ssrc: 0x5EED, identity: "alice", source: buffer)
        let first = try packets[0].withUnsafeBytes { try RTPPacketView(parsing: $0).timestamp }
        var heard: [Float] = []
        var period = [Float](repeating: 0, count: 480)
        var next = 0
        for tick in 0..<Int(seconds * 100) {
            let now = Double(tick) / 100
            while next < packets.count {
                let arrives = try packets[next].withUnsafeBytes { bytes -> Double? in
                    let view = try RTPPacketView(parsing: bytes)
                    let at = firstSentAt + Double(view.timestamp &- first) / 48_000 + 0.04
                    guard at <= now else { return nil }
                    buffer.insert(payload: view.payload, sequenceNumber: view.sequenceNumber, timestamp: view.timestamp, arrival: now)
                    return at
                }
                guard arrives != nil else { break }
                next += 1
            }
            period.withUnsafeMutableBufferPointer { mix.mix(into: $0, now: now) }
            heard += period
        }
        return heard
    }

    static func headers(_ packets: [[UInt8]]) throws -> [RTPHeader] {
        try packets.map { bytes in try bytes.withUnsafeBytes { try RTPHeader(RTPPacketView(parsing: $0)) } }
    }

    /// The level heard in each 100 ms from `start` seconds to `end`.
    static func windows(_ heard: [Float], from start: Double, to end: Double) -> [Double] {
        stride(from: start, to: end, by: 0.1).map { toneAmplitude(heard[Int($0 * 48_000)..<Int(($0 + 0.1) * 48_000)], frequency: 440) }
    }

    /// Frames the capture sent whose RTP time falls in `seconds` of the capture.
    static func sent(_ headers: [RTPHeader], during seconds: Range<Double>) -> Int {
        headers.filter { seconds.contains(Double($0.timestamp &- headers[0].timestamp) / 48_000) }.count
    }

    /// Muting sends what a talker falling silent sends (the encoder's fade to silence, then a
    /// DTX packet every 400 ms), never the microphone: the listener's audio stops within a
    /// frame, and the stream stays alive, so the listener does not take it for a stalled path.
    @Test func whileMutedOnlySilenceIsSentAndTheListenerHearsSilenceThenTheVoiceReturnsWithATalkspurt() throws {
        let gate = MediaGate(initialSetting: EncoderAdaptation().setting)
        let input = ScriptedTone(seconds: 3, actions: [
            (1, { _ = gate.update { $0.controls.apply(.mute) } }),
            (2, { _ = gate.update { $0.controls.apply(.unmute) } }),
        ])
        let packets = try Self.send(input, gate: gate)
        let headers = try Self.headers(packets)
        let whileMuted = Self.sent(headers, during: 1.0..<2.0)
        #expect(whileMuted <= 15, "while muted only the fade to silence and DTX: \(whileMuted) packets")
        #expect(Self.sent(headers, during: 0.0..<1.0) == 50 && Self.sent(headers, during: 2.04..<3.0) == 48, "every frame while talking")
        let resumed = try #require(headers.firstIndex { $0.timestamp &- headers[0].timestamp >= 96_000 })
        #expect(headers[resumed].marker, "the first packet after the mute starts a talkspurt")
        #expect(headers[resumed].sequenceNumber == headers[resumed - 1].sequenceNumber &+ 1, "no sequence gap: a pause, not a loss")

        // Heard on the listener's timeline: capture time + 40 ms, plus the jitter buffer's own delay.
        let heard = try Self.heard(packets, seconds: 3.5)
        let talking = Self.windows(heard, from: 0.5, to: 1.0)
        let muted = Self.windows(heard, from: 1.25, to: 2.0)
        let back = Self.windows(heard, from: 2.3, to: 3.0)
        print("muted: heard \(talking.map { String(format: "%.3f", $0) }) then \(muted.map { String(format: "%.3f", $0) }) then \(back.map { String(format: "%.3f", $0) })")
        #expect(talking.allSatisfy { $0 > 0.2 }, "the voice before the mute: \(talking)")
        #expect(muted.allSatisfy { $0 < 0.01 }, "silence while muted: \(muted)")
        #expect(back.allSatisfy { $0 > 0.2 }, "the voice after unmuting: \(back)")
    }

    @Test func pushToTalkSendsOnlyBetweenPressAndRelease() throws {
        let gate = MediaGate(initialSetting: EncoderAdaptation().setting)
        _ = gate.update { $0.controls.apply(.pushToTalkMode(true)) }
        let input = ScriptedTone(seconds: 3, actions: [
            (1, { _ = gate.update { $0.controls.apply(.pushToTalkPress) } }),
            (2, { _ = gate.update { $0.controls.apply(.pushToTalkRelease) } }),
        ])
        let packets = try Self.send(input, gate: gate)
        let headers = try Self.headers(packets)
        let outside = Self.sent(headers, during: 0.0..<1.0) + Self.sent(headers, during: 2.0..<3.0)
        #expect(outside <= 30, "before the press and after the release only silence and DTX: \(outside) packets")
        #expect(Self.sent(headers, during: 1.04..<2.0) == 48, "every frame while held")
        #expect(headers.first?.marker == true)
        let heard = try Self.heard(packets, seconds: 3.5)
        let before = Self.windows(heard, from: 0, to: 1)
        let held = Self.windows(heard, from: 1.25, to: 2.0)
        let after = Self.windows(heard, from: 2.25, to: 3.0)
        print("push-to-talk: heard \(Self.windows(heard, from: 0, to: 3.4).map { String(format: "%.2f", $0) })")
        #expect(before.allSatisfy { $0 < 0.01 }, "nothing before the press: \(before)")
        #expect(held.allSatisfy { $0 > 0.2 }, "the voice while held: \(held)")
        #expect(after.allSatisfy { $0 < 0.01 }, "nothing after the release: \(after)")
    }
}
