import CALSA
import Foundation
import Testing

/// Proves alsa-lib is linked and working: a PCM defined in a config the test writes, using
/// the `file` plugin over a `null` slave, captures exactly the samples of a known file.
@Suite("alsa-lib is linked")
struct ALSALinkTests {
    @Test func filePluginCaptureReadsTheKnownFile() throws {
        let samples = (0..<4_800).map { Int16(truncatingIfNeeded: $0 * 7 - 12_000) }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-alsa-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("in.raw")
        try samples.withUnsafeBytes { Data($0) }.write(to: input)

        let configText = """
        pcm.parleytest {
            type file
            slave.pcm { type null }
            file "/dev/null"
            infile "\(input.path)"
            format "raw"
        }
        """
        var config: OpaquePointer?
        #expect(snd_config_top(&config) == 0)
        defer { snd_config_delete(config) }
        var stream: OpaquePointer?
        let loaded = configText.withCString { text in
            snd_input_buffer_open(&stream, text, strlen(text)) == 0 ? snd_config_load(config, stream) : -1
        }
        snd_input_close(stream)
        #expect(loaded == 0, "the test's ALSA config should load")

        var pcm: OpaquePointer?
        let opened = snd_pcm_open_lconf(&pcm, "parleytest", SND_PCM_STREAM_CAPTURE, 0, config)
        #expect(opened == 0, "opening the file-plugin PCM failed: \(String(cString: snd_strerror(opened)))")
        guard opened == 0 else { return }
        defer { snd_pcm_close(pcm) }
        let set = snd_pcm_set_params(pcm, SND_PCM_FORMAT_S16_LE, SND_PCM_ACCESS_RW_INTERLEAVED, 1, 48_000, 0, 100_000)
        #expect(set == 0, "setting 48 kHz mono S16: \(String(cString: snd_strerror(set)))")

        var captured = [Int16](repeating: 0, count: samples.count)
        var done = 0
        while done < samples.count {
            let read = captured.withUnsafeMutableBufferPointer { buffer in
                snd_pcm_readi(pcm, buffer.baseAddress! + done, snd_pcm_uframes_t(samples.count - done))
            }
            if read < 0 {
                Issue.record("snd_pcm_readi failed: \(String(cString: snd_strerror(Int32(read))))")
                return
            }
            done += Int(read)
        }
        #expect(captured == samples)
    }
}
