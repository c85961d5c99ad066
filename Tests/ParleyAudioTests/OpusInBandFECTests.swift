import Foundation
@testable import ParleyAudio
import Testing

/// The jitter buffer's reading of whether a packet carries FEC for the one before it.
@Suite("Opus in-band FEC flag")
struct OpusInBandFECTests {
    /// Speech encoded with FEC and expected loss: most packets after speech frames carry
    /// LBRR data; encoded without FEC, none does; and arbitrary bytes never trap.
    @Test func speechEncodedWithFECCarriesItAndWithoutDoesNot() throws {
        let speech = try TestSpeech.recorded()
        let withFEC = try EncodedStream(speech, bitrate: 32_000, fec: true)
        let withoutFEC = try EncodedStream(speech, bitrate: 32_000, fec: false)
        func carrying(_ stream: EncodedStream) -> Int {
            stream.packets.filter { packet in packet.withUnsafeBytes { OpusInBandFEC.isCarried(by: $0) } }.count
        }
        print("packets carrying FEC: \(carrying(withFEC)) of \(withFEC.packets.count) with FEC on, \(carrying(withoutFEC)) with it off")
        #expect(carrying(withFEC) >= withFEC.packets.count / 3)
        #expect(carrying(withoutFEC) == 0)
        var generator = SeededGenerator(seed: 5)
        for length in 0..<200 {
            let bytes = (0..<(length % 40)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            _ = bytes.withUnsafeBytes { OpusInBandFEC.isCarried(by: $0) }
        }
    }
}
