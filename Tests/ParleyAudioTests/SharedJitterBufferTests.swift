import Foundation
import ParleyAudio
import Testing

@Suite("Shared jitter buffer")
struct SharedJitterBufferTests {
    /// The call's two threads at once: a network thread inserts 20 ms packets in real time
    /// while the playback thread reads 10 ms periods through the mixer, and the status
    /// figures are read meanwhile. Every packet is accounted for (played, rebuilt,
    /// concealed or late) and nearly all are played from themselves; only a scheduling
    /// stall of the loaded machine could make one late, so the test allows a tenth.
    @Test func networkAndPlaybackThreadsShareOneBuffer() async throws {
        let speech = try TestSpeech.recorded()
        let stream = try EncodedStream(speech)
        let shared = try SharedJitterBuffer()
        let start = Date()
        @Sendable func now() -> Double { Date().timeIntervalSince(start) }
        let packets = stream.packets
        let network = Thread {
            for (index, packet) in packets.enumerated() {
                let due = Double(index) * 0.02
                let wait = due - now()
                if wait > 0 { Thread.sleep(forTimeInterval: wait) }
                packet.withUnsafeBytes {
                    shared.insert(payload: $0, sequenceNumber: UInt16(index), timestamp: UInt32(index * 960), arrival: now())
                }
            }
        }
        network.start()
        // The playback side on a thread of its own too, as in a call: a task would wait for a
        // thread of the shared pool, which the suite's other tests can hold for a minute, and
        // its reads would then come long after the packets.
        let audible = await withCheckedContinuation { (done: CheckedContinuation<Int, Never>) in
            Thread.detachNewThread {
                let mixer = Mixer<Int>()
                mixer.add(1, source: shared)
                var period = [Float](repeating: 0, count: 480)
                var audible = 0
                let periods = Int(Double(speech.count) / 480) + 30
                for index in 0..<periods {
                    let wait = Double(index) * 0.01 - now()
                    if wait > 0 { Thread.sleep(forTimeInterval: wait) }
                    period.withUnsafeMutableBufferPointer { mixer.mix(into: $0, now: now()) }
                    if period.contains(where: { abs($0) > 0.01 }) { audible += 1 }
                    _ = shared.statistics  // the status line reads while both threads run
                }
                done.resume(returning: audible)
            }
        }
        let statistics = shared.statistics
        print("shared buffer: decoded \(statistics.decodedFrames)/\(packets.count), late \(statistics.late), concealed \(statistics.concealedFrames), underruns \(statistics.underruns); \(audible) audible periods")
        let accounted = statistics.decodedFrames + statistics.fecRecovered + statistics.concealedFrames + statistics.late
        #expect(accounted >= packets.count)
        #expect(statistics.decodedFrames >= packets.count * 9 / 10)
        #expect(audible > 50)
    }
}
