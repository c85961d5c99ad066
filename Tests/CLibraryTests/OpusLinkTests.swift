import COpus
import Foundation
import Testing

/// Proves libopus is linked and working: a 20 ms frame of a sine survives an encode/decode.
@Suite("libopus is linked")
struct OpusLinkTests {
    @Test func aSineFrameComesBackCorrelatedWithTheInput() throws {
        let rate: Int32 = 48_000
        let frame = 960
        var error: Int32 = 0
        let encoder = try #require(opus_encoder_create(rate, 1, OPUS_APPLICATION_VOIP, &error))
        defer { opus_encoder_destroy(encoder) }
        #expect(error == OPUS_OK)
        let decoder = try #require(opus_decoder_create(rate, 1, &error))
        defer { opus_decoder_destroy(decoder) }
        #expect(parley_opus_encoder_set_int(encoder, PARLEY_OPUS_SET_BITRATE, 32_000) == OPUS_OK)

        var lookahead: Int32 = 0
        #expect(parley_opus_encoder_get_int(encoder, PARLEY_OPUS_GET_LOOKAHEAD, &lookahead) == OPUS_OK)

        // Ten frames of a 440 Hz sine at half scale; compare the sixth decoded frame.
        let total = frame * 10
        let step = 2 * Double.pi * 440 / Double(rate)
        let input: [Float] = (0..<total).map { Float(0.5 * sin(step * Double($0))) }
        var output = [Float](repeating: 0, count: total)
        var packet = [UInt8](repeating: 0, count: 1_500)
        for index in 0..<10 {
            let bytes = input[index * frame..<(index + 1) * frame].withContiguousStorageIfAvailable { samples in
                opus_encode_float(encoder, samples.baseAddress!, Int32(frame), &packet, Int32(packet.count))
            }!
            #expect(bytes > 0)
            let decoded = output.withUnsafeMutableBufferPointer { out in
                opus_decode_float(decoder, packet, bytes, out.baseAddress! + index * frame, Int32(frame), 0)
            }
            #expect(decoded == Int32(frame))
        }

        // The codec delays the signal by its lookahead; find the best lag near it.
        let start = 5 * frame
        let best = (0...Int(lookahead) + 120).map { lag in
            correlation(Array(input[start - lag..<start - lag + frame]), Array(output[start..<start + frame]))
        }.max()!
        #expect(best > 0.95, "decoded sine should match the input; best correlation \(best)")
    }
}

func correlation(_ a: [Float], _ b: [Float]) -> Double {
    var ab = 0.0, aa = 0.0, bb = 0.0
    for (x, y) in zip(a, b) {
        ab += Double(x) * Double(y)
        aa += Double(x) * Double(x)
        bb += Double(y) * Double(y)
    }
    return aa > 0 && bb > 0 ? ab / (aa * bb).squareRoot() : 0
}
