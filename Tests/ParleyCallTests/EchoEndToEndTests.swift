import Foundation
import ParleyAudio
import ParleyClient
import ParleyEvaluation
import Testing

/// Acceptance 4: the echo of what a client plays, picked up by its own microphone, does
/// not reach the others, while what its user says does.
@Suite("Echo, end to end")
struct EchoEndToEndTests {
    /// Ada is on a laptop: her microphone hears Bob from her speaker through a room (RT60
    /// 0.2 s, 60 ms away, −3 dB) as well as her own voice. Bob talks alone for 9 s, Ada
    /// then talks alone, then both at once. At Bob's end, what arrives from Ada while only
    /// Bob talked (after 4 s for the canceller to converge) must be at least 25 dB under the
    /// echo in her microphone (the acceptance figure; under 15 dB people hear themselves),
    /// and her own speech must arrive intact (envelope correlation ≥ 0.80 against what she
    /// said; Opus alone gives about 0.9).
    @Test func theEchoOfWhatAClientPlaysStaysOutOfWhatTheOthersHear() async throws {
        let bobSays = try Conversation.synthesize(voice: "en-us", text: "The quick brown fox jumps over the lazy dog, and then it runs back home across the field, where the farmer waits for it.", directory: NSTemporaryDirectory())
        let adaSays = try Conversation.synthesize(voice: "en+f3", text: "Sorry to interrupt, but we should check the numbers again before Friday.", directory: NSTemporaryDirectory())
        let rate = 48_000
        let length = 17 * rate
        var far = [Float](repeating: 0, count: length)
        var near = [Float](repeating: 0, count: length)
        let farStart = rate / 2
        for (index, sample) in bobSays.enumerated() where farStart + index < length { far[farStart + index] = sample }
        let nearStart = farStart + bobSays.count + rate / 2
        for (index, sample) in adaSays.enumerated() where nearStart + index < length { near[nearStart + index] = sample }
        // Double talk: Bob starts again over the end of Ada's sentence.
        let doubleTalkStart = nearStart + adaSays.count / 2
        for (index, sample) in bobSays.prefix(length - doubleTalkStart).enumerated() { far[doubleTalkStart + index] += sample }

        let room = try await CallRoom(room: "echo")
        defer { Task { await room.close() } }
        let farPath = room.directory + "/bob-says.wav"
        try WAVAudio(sampleRate: rate, samples: far).write(to: farPath)
        let echoPath = EchoPath(near: near, rt60: 0.2, delayMilliseconds: 60)
        let rawPath = room.directory + "/ada-raw.wav"

        var ada = room.configuration(for: "ada", input: .device(echoPath.input), durationSeconds: Double(length) / Double(rate) + 1)
        ada.output = .device(echoPath.output)
        ada.recordRawPath = rawPath
        #expect(ada.cancelsEcho, "a sound-card-like input gets echo cancellation by default")
        let bob = room.configuration(for: "bob", input: .wav(path: farPath), durationSeconds: Double(length) / Double(rate) + 1)
        let sessions = [try CallSession(ada), try CallSession(bob)]
        let results = try await CallSlots.shared.withSlot {
            await withTaskGroup(of: Result<CallStatistics, CallError>.self) { group in
                for session in sessions { group.addTask { await runOnThread { session.run() } } }
                var results: [Result<CallStatistics, CallError>] = []
                for await result in group { results.append(result) }
                return results
            }
        }
        for result in results { if case let .failure(error) = result { Issue.record("a call failed: \(error)") } }
        let adaStatistics = sessions[0].statistics(), bobStatistics = sessions[1].statistics()

        // What Bob heard of Ada, aligned with what Ada said (the delay comes from her speech).
        let heard = try room.received(by: "bob", from: "ada")
        let raw = try WAVAudio(contentsOf: rawPath).samples
        let offset = Int(Int64(bitPattern: try #require(adaStatistics.captureStartedAtNanoseconds) &- (try #require(bobStatistics.playbackStartedAtNanoseconds))) * 48 / 1_000_000)
        let nearOnly = SpeechComparison.compare(sent: Array(near[..<doubleTalkStart]), received: heard, offset: offset)
        let delay = Int(((nearOnly.delayPercentile(0.5) ?? 60) * 48).rounded())

        // Far-end single talk after convergence: the echo in Ada's microphone against what Bob received.
        let measured = (farStart + 4 * rate)..<(farStart + bobSays.count)
        func energy(_ signal: [Float], _ range: Range<Int>, shift: Int = 0) -> Double {
            var sum = 0.0
            for index in range where index + shift >= 0 && index + shift < signal.count {
                sum += Double(signal[index + shift]) * Double(signal[index + shift])
            }
            return sum
        }
        let echoInMicrophone = energy(raw, measured)
        let echoAtBob = energy(heard, measured, shift: offset + delay)
        let attenuation = 10 * log10(echoInMicrophone / max(echoAtBob, 1e-12))

        let nearFrames = SpectralEnvelope.activeFrames(near, in: nearStart..<doubleTalkStart)
        let doubleTalk = SpeechComparison.compare(sent: near, received: heard, offset: offset)
        let doubleTalkFrames = SpectralEnvelope.activeFrames(near, in: doubleTalkStart..<(nearStart + adaSays.count))
        let doubleTalkScore = SpectralEnvelope.correlation(doubleTalk.alignedReceived, near, frames: doubleTalkFrames)
        print(String(format: "echo at Bob %.1f dB under the echo in Ada's microphone over %.1f s of Bob alone (threshold 25 dB); "
                        + "Ada's speech at Bob: envelope %.3f over %d frames (threshold 0.80), delay %.0f ms; in double talk %.3f",
                     attenuation, Double(measured.count) / Double(rate), nearOnly.envelopeCorrelation, nearFrames.count,
                     nearOnly.delayPercentile(0.5) ?? -1, doubleTalkScore))
        #expect(attenuation >= 25)
        #expect(nearOnly.envelopeCorrelation >= 0.80)
        #expect(nearOnly.dropouts == 0)
    }
}
