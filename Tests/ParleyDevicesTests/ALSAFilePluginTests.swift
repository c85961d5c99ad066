import Foundation
import ParleyAudio
import ParleyDevices
import Testing

/// A scratch directory and an ALSA configuration that defines `file`-plugin PCMs in it:
/// capture reads `in.raw`, playback writes `out.raw`, both over a `null` slave.
struct FilePluginRig {
    let directory: URL
    var inputPath: String { directory.appendingPathComponent("in.raw").path }
    var outputPath: String { directory.appendingPathComponent("out.raw").path }

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-alsa-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }

    var configuration: String {
        """
        pcm.parleycapture {
            type file
            slave.pcm { type null }
            file "/dev/null"
            infile "\(inputPath)"
            format "raw"
        }
        pcm.parleyplayback {
            type file
            slave.pcm { type null }
            file "\(outputPath)"
            format "raw"
        }
        """
    }

    func device(_ name: String, channels: Int = 1) -> ALSADeviceConfiguration {
        var device = ALSADeviceConfiguration(name: name)
        device.channels = channels
        device.configurationText = configuration
        return device
    }

    func writeInput(_ samples: [Int16]) throws {
        try samples.withUnsafeBytes { Data($0) }.write(to: URL(fileURLWithPath: inputPath))
    }

    func readOutput() throws -> [Int16] {
        let data = try Data(contentsOf: URL(fileURLWithPath: outputPath))
        return data.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
    }
}

/// Acceptance 3: ALSA through its `file` plugin, on a machine with no sound card.
@Suite("ALSA through the file plugin")
struct ALSAFilePluginTests {
    /// Recorded speech fed to a capture PCM comes out of `ALSACapture` sample for sample.
    @Test func capturedSamplesEqualTheInputFile() throws {
        let rig = try FilePluginRig()
        defer { rig.remove() }
        let speech = try WAVAudio(contentsOf: "/usr/share/sounds/alsa/Front_Center.wav")
        let input = speech.samples.map(SampleConversion.int16)
        try rig.writeInput(input)

        let capture = try ALSACapture(rig.device("parleycapture"))
        #expect(capture.sampleRate == 48_000 && capture.periodFrames == 480)
        var captured = [Float]()
        var period = [Float](repeating: 0, count: capture.periodFrames)
        while captured.count < input.count {
            let frames = try period.withUnsafeMutableBufferPointer { try capture.read(into: $0) }
            captured += period[..<frames]
        }
        let asInt16 = captured.prefix(input.count).map(SampleConversion.int16)
        let mismatches = zip(asInt16, input).filter { $0 != $1 }.count
        print("captured \(asInt16.count) samples through the file plugin; \(mismatches) differ from the input")
        #expect(asInt16.count == input.count)
        #expect(mismatches == 0)
        #expect(capture.xruns == 0)
    }

    /// The mix of two remote speakers (two jitter buffers playing Opus speech), written
    /// period by period to `ALSAPlayback`, lands in the plugin's output file exactly.
    @Test func playedSamplesEqualWhatTheMixerProduced() throws {
        let rig = try FilePluginRig()
        defer { rig.remove() }
        let voices = try ["Front_Left", "Front_Right"].map { try WAVAudio(contentsOf: "/usr/share/sounds/alsa/\($0).wav").mono }
        let mixer = Mixer<UInt32>()
        for (index, voice) in voices.enumerated() {
            let buffer = try JitterBuffer()
            let encoder = try OpusEncoder()
            for frame in 0..<(voice.count / 960) {
                let packet = try encoder.encode(Array(voice[frame * 960..<(frame + 1) * 960]))
                // Everything arrives at once; the buffer still paces playback by its clock.
                buffer.insert(payload: packet, sequenceNumber: UInt16(frame), timestamp: UInt32(frame * 960), arrival: Double(frame) * 0.02)
            }
            mixer.add(UInt32(index), source: buffer, gainDecibels: -3)
        }

        var mixed = [Float]()
        do {
            let playback = try ALSAPlayback(rig.device("parleyplayback"))
            var period = [Float](repeating: 0, count: playback.periodFrames)
            for index in 0..<200 {
                period.withUnsafeMutableBufferPointer { mixer.mix(into: $0, now: Double(index) * 0.01) }
                mixed += period
                try period.withUnsafeBufferPointer { try playback.write($0) }
            }
            try playback.drain()
            #expect(playback.xruns == 0)
        }  // closing the PCM flushes the plugin's file
        let expected = mixed.map(SampleConversion.int16)
        let written = try rig.readOutput()
        let mismatches = zip(written, expected).filter { $0 != $1 }.count
        let audible = expected.filter { abs($0) > 300 }.count
        print("played \(expected.count) mixed samples (\(audible) above -40 dBFS); the file holds \(written.count), \(mismatches) differ")
        #expect(audible > 10_000, "the mix should hold speech, not silence")
        #expect(written.count == expected.count)
        #expect(mismatches == 0)
    }

    /// A device name that does not exist gets an error that says so and what to do.
    @Test func unknownDeviceGivesAClearError() {
        var device = ALSADeviceConfiguration(name: "no-such-device-anywhere")
        device.configurationText = "pcm.other { type null }"
        #expect {
            _ = try ALSACapture(device)
        } throws: { error in
            let text = "\(error)"
            return text.contains("no-such-device-anywhere") && text.contains("parley devices")
        }
    }

    enum BadSetting: CaseIterable, Sendable { case threeChannels, tooLowRate, bufferUnderTwoPeriods, emptyName }

    @Test(arguments: BadSetting.allCases)
    func invalidSettingsAreRejectedWithAMessage(setting: BadSetting) {
        var device = ALSADeviceConfiguration(name: "default")
        switch setting {
        case .threeChannels: device.channels = 3
        case .tooLowRate: device.sampleRate = 1_000
        case .bufferUnderTwoPeriods: device.bufferFrames = 100
        case .emptyName: device.name = ""
        }
        #expect {
            try device.validate()
        } throws: { error in
            print("\(setting): \(error)")
            return !"\(error)".isEmpty
        }
    }
}
