import Foundation
import ParleyAudio
import ParleyDevices
import Testing

@Suite("WAV file devices")
struct FileDeviceTests {
    static func scratch() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-files-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    /// A WAV input read to the end and written to a WAV output gives the same file.
    @Test func fileInputToFileOutputIsLossless() throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("copy.wav").path
        let input = try WAVFileInput(path: "/usr/share/sounds/alsa/Front_Center.wav", pacing: .asFastAsPossible)
        let output = try WAVFileOutput(path: path, pacing: .asFastAsPossible)
        var period = [Float](repeating: 0, count: input.periodFrames)
        while true {
            let frames = try period.withUnsafeMutableBufferPointer { try input.read(into: $0) }
            if frames == 0 { break }
            try period[..<frames].withUnsafeBufferPointer { try output.write($0) }
        }
        try output.drain()
        let original = try WAVAudio(contentsOf: "/usr/share/sounds/alsa/Front_Center.wav")
        let copy = try WAVAudio(contentsOf: path)
        #expect(copy.samples == original.samples)
    }

    /// Paced in real time, 30 periods of 10 ms take about 300 ms; as fast as possible, far less.
    @Test func realTimePacingKeepsTheSoundCardsPace() throws {
        let paced = try WAVFileInput(path: "/usr/share/sounds/alsa/Front_Center.wav", pacing: .realTime)
        let fast = try WAVFileInput(path: "/usr/share/sounds/alsa/Front_Center.wav", pacing: .asFastAsPossible)
        var period = [Float](repeating: 0, count: 480)
        func time(_ input: WAVFileInput) throws -> Double {
            let start = Date()
            for _ in 0..<30 { _ = try period.withUnsafeMutableBufferPointer { try input.read(into: $0) } }
            return Date().timeIntervalSince(start)
        }
        let pacedTime = try time(paced)
        let fastTime = try time(fast)
        print("30 periods: paced \(pacedTime) s (expected ≥ 0.29 s), unpaced \(fastTime) s")
        #expect(pacedTime >= 0.29 && pacedTime < 2)
        #expect(fastTime < 0.1)
    }

    /// espeak-ng's 22,050 Hz speech comes out of a file input at 48 kHz, as long as before.
    @Test func inputResamplesToTheDeviceRate() throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("speech.wav").path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/espeak-ng")
        process.arguments = ["-w", path, "testing one two three"]
        try process.run()
        process.waitUntilExit()
        let original = try WAVAudio(contentsOf: path)
        #expect(original.sampleRate == 22_050)
        let input = try WAVFileInput(path: path, pacing: .asFastAsPossible)
        let expected = original.frameCount * 48_000 / 22_050
        print("\(original.frameCount) frames at 22,050 Hz became \(input.frameCount) at 48 kHz (expected \(expected))")
        #expect(abs(input.frameCount - expected) <= 1)
    }

    @Test func missingFileSaysWhichFile() {
        #expect {
            _ = try WAVFileInput(path: "/nonexistent/voice.wav", pacing: .asFastAsPossible)
        } throws: { error in
            "\(error)".contains("/nonexistent/voice.wav") && "\(error)".contains("no such file")
        }
    }

    @Test func deviceListingDoesNotFailWithoutASoundCard() {
        let devices = ALSADeviceList.pcms()
        print("ALSA lists \(devices.count) PCMs: \(devices.map(\.name).joined(separator: ", "))")
        #expect(devices.allSatisfy { !$0.name.isEmpty })
    }
}
