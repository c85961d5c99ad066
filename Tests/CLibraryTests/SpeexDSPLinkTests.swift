import CSpeexDSP
import Foundation
import Testing

/// Proves SpeexDSP is linked and working: its echo canceller, set to 48 kHz, removes a pure
/// delayed copy of the far-end signal from the microphone signal.
@Suite("SpeexDSP is linked")
struct SpeexDSPLinkTests {
    @Test func echoStateAt48kHzCancelsADelayedCopyByTwentyDecibels() throws {
        let rate: Int32 = 48_000
        let frame = 480  // 10 ms
        let tail = 4_800  // 100 ms
        let echo = try #require(speex_echo_state_init(Int32(frame), Int32(tail)))
        defer { speex_echo_state_destroy(echo) }
        // Without this, SpeexDSP assumes 8 kHz and adapts with the wrong time constants.
        #expect(parley_speex_echo_set_int(echo, SPEEX_ECHO_SET_SAMPLING_RATE, rate) == 0)
        var readBack: Int32 = 0
        #expect(parley_speex_echo_get_int(echo, SPEEX_ECHO_GET_SAMPLING_RATE, &readBack) == 0)
        #expect(readBack == rate)

        // Far end: 10 s of white noise. Microphone: the far end delayed by 20 ms at half amplitude.
        var rng = SystemRandomNumberGenerator()
        let seconds = 10
        let far = (0..<(seconds * Int(rate))).map { _ in Int16.random(in: -8_000...8_000, using: &rng) }
        let delay = 960
        let mic = (0..<far.count).map { $0 >= delay ? far[$0 - delay] / 2 : 0 }
        var out = [Int16](repeating: 0, count: far.count)
        for start in stride(from: 0, to: far.count, by: frame) {
            mic.withUnsafeBufferPointer { m in
                far.withUnsafeBufferPointer { f in
                    out.withUnsafeMutableBufferPointer { o in
                        speex_echo_cancellation(echo, m.baseAddress! + start, f.baseAddress! + start, o.baseAddress! + start)
                    }
                }
            }
        }

        // Echo return loss enhancement over the last 2 s, after convergence.
        let tailStart = far.count - 2 * Int(rate)
        let micPower = mic[tailStart...].reduce(0.0) { $0 + Double($1) * Double($1) }
        let outPower = out[tailStart...].reduce(0.0) { $0 + Double($1) * Double($1) }
        let erle = 10 * log10(micPower / max(outPower, 1))
        #expect(erle >= 20, "echo should be at least 20 dB down; measured \(erle) dB")
    }
}
