import Foundation
import ParleyAudio
import Testing

/// The two ways the echo tests run the outgoing path.
enum EchoRunner: String, CaseIterable, CustomStringConvertible, Sendable {
    /// `OfflineOutgoingPath.run`, the code behind `parley process`.
    case library
    /// The built `parley process` binary, on 16-bit WAV files in a temporary directory.
    case binary

    var description: String { rawValue }

    struct Result {
        /// The microphone signal as the path saw it (16-bit quantised for the binary).
        var mic: [Float]
        var output: [Float]
        /// The delay the path estimated, ms.
        var estimatedDelay: Double?
    }

    func process(mic: [Float], far: [Float]) throws -> Result {
        switch self {
        case .library:
            let report = try OfflineOutgoingPath.run(mic: mic, far: far, options: OfflineOutgoingPath.Options())
            return Result(mic: mic, output: report.output, estimatedDelay: report.estimatedDelayMilliseconds)
        case .binary:
            return try Self.runBinary(mic: mic, far: far)
        }
    }

    /// `parley` sits next to the test bundle in the build directory (`swift build` builds it
    /// with the tests; Scripts/test does).
    static var binaryPath: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("parley").path
    }

    private static func runBinary(mic: [Float], far: [Float]) throws -> Result {
        let binary = binaryPath
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw TestSpeech.Unavailable(description: "\(binary) is missing: build it first with `swift build --build-tests`")
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-process-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let micPath = directory.appendingPathComponent("mic.wav").path
        let farPath = directory.appendingPathComponent("far.wav").path
        let outPath = directory.appendingPathComponent("out.wav").path
        try WAVAudio(sampleRate: 48_000, samples: mic).write(to: micPath)
        try WAVAudio(sampleRate: 48_000, samples: far).write(to: farPath)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["process", "--mic", micPath, "--far", farPath, "--out", outPath]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let printed = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "parley process failed: \(printed)")
        // "estimated delay: 60.0 ms (first estimate after 1.5 s); …"
        let delay = printed.split(separator: "\n").first { $0.hasPrefix("estimated delay: ") }
            .flatMap { Double($0.dropFirst("estimated delay: ".count).prefix { $0 != " " }) }
        return Result(
            mic: try WAVAudio(contentsOf: micPath).samples,
            output: try WAVAudio(contentsOf: outPath).samples,
            estimatedDelay: delay)
    }
}
