import Foundation
import ParleyAudio
import Testing

/// `parley process` beyond the echo tests: its options and its input checks.
@Suite("parley process")
struct ProcessCommandTests {
    struct Run {
        var status: Int32
        var printed: String
        var errors: String
        var output: [Float]?
    }

    static func run(_ arguments: [String], mic: [Float]? = nil, far: [Float]? = nil) throws -> Run {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var arguments = arguments
        for (name, signal) in [("mic", mic), ("far", far)] {
            guard let signal else { continue }
            let path = directory.appendingPathComponent("\(name).wav").path
            try WAVAudio(sampleRate: 48_000, samples: signal).write(to: path)
            arguments += ["--\(name)", path]
        }
        let outPath = directory.appendingPathComponent("out.wav").path
        if !arguments.contains("--out") { arguments += ["--out", outPath] }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: EchoRunner.binaryPath)
        process.arguments = ["process"] + arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let printed = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let errors = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return Run(status: process.terminationStatus, printed: printed, errors: errors, output: try? WAVAudio(contentsOf: outPath).samples)
    }

    /// A given delay and an Opus round trip: the echo is still removed (the codec's noise
    /// on a near-silent residual is far below the echo), and what was sent is aligned with
    /// the microphone. With --aec off, the echo stays.
    @Test func optionsChangeWhatIsSent() throws {
        let far = try TestSpeech.farTalker.get()
        let mic = EchoScenario(far: far, rt60: 0.2, delayMilliseconds: 60).microphone()
        let quantisedMic = mic.map { SampleConversion.float(SampleConversion.int16($0)) }
        let given = try Self.run(["--delay", "60", "--opus", "32"], mic: mic, far: far)
        let off = try Self.run(["--aec", "off"], mic: mic, far: far)
        let givenERLE = energyRatioDecibels(quantisedMic, try #require(given.output), in: 5 * 48_000..<mic.count)
        let offERLE = energyRatioDecibels(quantisedMic, try #require(off.output), in: 5 * 48_000..<mic.count)
        print("--delay 60 --opus 32: ERLE \(givenERLE) dB (threshold 25); --aec off: \(offERLE) dB (must stay under 10)\n\(given.printed)")
        #expect(given.status == 0 && off.status == 0)
        #expect(givenERLE >= 25)
        #expect(offERLE < 10)
        #expect(given.printed.contains("Opus round trip at 32 kb/s"))
        #expect(off.printed.contains("echo cancellation: off"))
    }

    /// Bad inputs get a message that says what is wrong and what to do, and an exit
    /// status scripts can tell apart.
    @Test func badInputsAreExplained() throws {
        let tone = (0..<48_000).map { Float(sin(Double($0) * 0.05) * 0.1) }
        let missing = try Self.run(["--mic", "/no/such/mic.wav", "--far", "/no/such/far.wav"])
        #expect(missing.status == 10)
        #expect(missing.errors.contains("/no/such/mic.wav") && missing.errors.contains("no such file"))
        let shorter = try Self.run([], mic: tone, far: Array(tone.prefix(24_000)))
        #expect(shorter.status == 10)
        #expect(shorter.errors.contains("same time"))
        let badTail = try Self.run(["--tail", "5"], mic: tone, far: tone)
        #expect(badTail.status == 2)
        #expect(badTail.errors.contains("20–1000 ms"))
        let badDelay = try Self.run(["--delay", "soon"], mic: tone, far: tone)
        #expect(badDelay.status == 2)
        print("messages:\n\(missing.errors)\(shorter.errors)\(badTail.errors.split(separator: "\n").first ?? "")")
    }

    @Test func recordingsAtAnotherRateOrInStereoAreRefusedWithTheFix() {
        let mono48 = WAVAudio(sampleRate: 48_000, samples: [Float](repeating: 0, count: 4_800))
        let mono44 = WAVAudio(sampleRate: 44_100, samples: [Float](repeating: 0, count: 4_410))
        let stereo = WAVAudio(sampleRate: 48_000, channels: 2, samples: [Float](repeating: 0, count: 9_600))
        #expect { _ = try OfflineOutgoingPath.validate(mic: mono44, far: mono48) } throws: {
            "\($0)".contains("MIC is 44100 Hz") && "\($0)".contains("sox IN.wav -r 48000")
        }
        #expect { _ = try OfflineOutgoingPath.validate(mic: mono48, far: stereo) } throws: {
            "\($0)".contains("FAR is stereo") && "\($0)".contains("-c 1")
        }
    }
}
