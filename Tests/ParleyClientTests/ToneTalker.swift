import Foundation
import ParleyAudio
import ParleyWire

/// A remote talker for the receive-side tests: a steady tone, encoded with the real Opus
/// encoder into 20 ms RTP packets, as a relay would deliver them. No socket, no clock:
/// the tests say when each packet arrives and when playback reads.
struct ToneTalker {
    let ssrc: UInt32
    let frequency: Double
    let amplitude: Float
    private let encoder: OpusEncoder
    private var sample = 0
    private(set) var sequenceNumber: UInt16 = 1_000
    private var timestamp: UInt32 = 96_000

    init(ssrc: UInt32, frequency: Double, amplitude: Float = 0.3) throws {
        self.ssrc = ssrc
        self.frequency = frequency
        self.amplitude = amplitude
        encoder = try OpusEncoder(OpusEncoder.Configuration())
    }

    /// The next 20 ms of the tone as an RTP packet.
    mutating func nextPacket(payloadType: UInt8 = RTPHeader.opusPayloadType) throws -> [UInt8] {
        let tone: [Float] = (0..<960).map { index in
            amplitude * Float(sin(Double(sample + index) * 2 * Double.pi * frequency / 48_000))
        }
        sample += 960
        let payload = try encoder.encode(tone)
        let packet = try RTPHeader(payloadType: payloadType, sequenceNumber: sequenceNumber, timestamp: timestamp, ssrc: ssrc)
            .serialized(payload: payload)
        sequenceNumber &+= 1
        timestamp &+= 960
        return packet
    }
}

/// What a listener hears of one frequency in `samples` (48 kHz): the amplitude of that
/// sinusoid, by the Goertzel algorithm, so two talkers in one mix can be told apart.
func toneAmplitude(_ samples: ArraySlice<Float>, frequency: Double) -> Double {
    guard !samples.isEmpty else { return 0 }
    let coefficient = 2 * cos(2 * Double.pi * frequency / 48_000)
    var previous = 0.0
    var beforePrevious = 0.0
    for sample in samples {
        let current = Double(sample) + coefficient * previous - beforePrevious
        beforePrevious = previous
        previous = current
    }
    let power = previous * previous + beforePrevious * beforePrevious - coefficient * previous * beforePrevious
    return 2 * power.squareRoot() / Double(samples.count)
}

func rms(_ samples: ArraySlice<Float>) -> Double {
    guard !samples.isEmpty else { return 0 }
    return (samples.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(samples.count)).squareRoot()
}
