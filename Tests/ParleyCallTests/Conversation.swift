import Foundation
import ParleyAudio
import Synchronization

/// Three people taking turns, as WAV inputs for three calls: each talker's track holds
/// their own turns and silence while the others speak, all tracks the same length.
///
/// The talkers are espeak-ng voices (a woman, an American man, a Scot), made once per test
/// run, resampled to 48 kHz with SpeexDSP and levelled to −20 dBFS over the active speech.
/// (alsa-utils' recorded voice was tried for one of them and dropped: "front left", "rear
/// right", "front centre" are so alike that when a loss burst takes the first word, a
/// window of the second resembles the first, and the measured delay jumps by a word.)
struct Conversation: Sendable {
    struct Unavailable: Error, CustomStringConvertible {
        let description: String
    }

    static let talkers = ["ada", "bob", "cy"]

    /// Each talker's track, 48 kHz mono.
    let tracks: [String: [Float]]
    /// Where each turn lies, in samples: (talker, range).
    let turns: [(talker: String, range: Range<Int>)]
    let directory: String

    var length: Int { tracks.values.first?.count ?? 0 }
    var seconds: Double { Double(length) / 48_000 }

    func path(of talker: String) -> String { directory + "/\(talker).wav" }

    /// The standard conversation: six turns, about 14 s.
    static let standard: Result<Conversation, Unavailable> = make()

    private static func make() -> Result<Conversation, Unavailable> {
        do {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-conversation-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let lines: [(String, [Float])] = [
                ("ada", try synthesize(voice: "en+f3", text: "Good morning everyone, shall we start with the numbers?", directory: directory)),
                ("bob", try synthesize(voice: "en-us", text: "Yes. Sales went up by twelve percent last week.", directory: directory)),
                ("cy", try synthesize(voice: "en-gb-scotland", text: "I will send the report on Thursday morning.", directory: directory)),
                ("ada", try synthesize(voice: "en+f3", text: "That is great news, thank you Bob.", directory: directory)),
                ("bob", try synthesize(voice: "en-us", text: "Please bring your umbrella tomorrow, it may rain.", directory: directory)),
                ("cy", try synthesize(voice: "en-gb-scotland", text: "Then let us meet again next week at noon.", directory: directory)),
            ]
            let rate = 48_000
            let gap = rate * 35 / 100
            var position = rate / 2
            var turns: [(talker: String, range: Range<Int>)] = []
            for (talker, speech) in lines {
                turns.append((talker, position..<position + speech.count))
                position += speech.count + gap
            }
            let length = position + rate / 2
            var tracks: [String: [Float]] = [:]
            for talker in talkers { tracks[talker] = [Float](repeating: 0, count: length) }
            for ((talker, speech), turn) in zip(lines, turns) {
                for (offset, sample) in speech.enumerated() { tracks[talker]![turn.range.lowerBound + offset] = sample }
            }
            for (talker, track) in tracks {
                try WAVAudio(sampleRate: rate, samples: track).write(to: directory + "/\(talker).wav")
            }
            return .success(Conversation(tracks: tracks, turns: turns, directory: directory))
        } catch let error as Unavailable {
            return .failure(error)
        } catch {
            return .failure(Unavailable(description: "the conversation could not be made: \(error)"))
        }
    }

    static func synthesize(voice: String, text: String, directory: String) throws -> [Float] {
        let path = directory + "/tts-\(UUID().uuidString).wav"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/espeak-ng")
        process.arguments = ["-v", voice, "-s", "170", "-w", path, text]
        do {
            try process.run()
        } catch {
            throw Unavailable(description: "espeak-ng is missing (run Scripts/bootstrap): \(error)")
        }
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw Unavailable(description: "espeak-ng exited with \(process.terminationStatus)") }
        let audio = try WAVAudio(contentsOf: path)
        return trimmed(normalized(try Resampler.resample(audio.mono, from: audio.sampleRate, to: 48_000)))
    }

    /// Scales to −20 dBFS RMS over the 10 ms frames within 40 dB of the loudest.
    static func normalized(_ signal: [Float]) -> [Float] {
        let level = activeRMS(signal)
        guard level > 0 else { return signal }
        let gain = Float(0.1 / level)
        return signal.map { $0 * gain }
    }

    static func activeRMS(_ signal: [Float]) -> Double {
        let frame = 480
        let energies = stride(from: 0, to: signal.count - frame + 1, by: frame).map { start in
            signal[start..<start + frame].reduce(0.0) { $0 + Double($1) * Double($1) } / Double(frame)
        }
        guard let loudest = energies.max(), loudest > 0 else { return 0 }
        let active = energies.filter { $0 >= loudest * 1e-4 }
        return (active.reduce(0, +) / Double(active.count)).squareRoot()
    }

    /// Without the leading and trailing near-silence (below −60 dBFS).
    static func trimmed(_ signal: [Float]) -> [Float] {
        guard let first = signal.firstIndex(where: { abs($0) > 0.001 }), let last = signal.lastIndex(where: { abs($0) > 0.001 }) else { return signal }
        return Array(signal[first...last])
    }
}
