import Foundation
import ParleyAudio
import Testing
@testable import ParleyClient

@Suite("Recordings and the status line")
struct CallRecordingTests {
    @Test func aWAVWrittenAsTheCallGoesReadsBackWithItsSizesFilledIn() throws {
        let path = NSTemporaryDirectory() + "parley-writer-\(UUID().uuidString).wav"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let writer = try WAVFileWriter(path: path)
        let tone = (0..<48_000).map { Float(sin(Double($0) * 0.03) * 0.5) }
        try tone.withUnsafeBufferPointer { try writer.append($0) }
        try writer.appendSilence(480)
        // Before close the data size is open-ended, and the file still reads.
        #expect(try WAVAudio(contentsOf: path).frameCount >= 0)
        try writer.close()
        let audio = try WAVAudio(contentsOf: path)
        #expect(audio.sampleRate == 48_000 && audio.channels == 1 && audio.frameCount == 48_480)
        #expect(zip(audio.samples, tone).allSatisfy { abs($0 - $1) < 1.0 / 16_000 })
    }

    @Test func anUnwritablePathIsNamedWithTheReason() {
        #expect { _ = try WAVFileWriter(path: "/no/such/folder/x.wav") } throws: { "\($0)".contains("/no/such/folder") && "\($0)".contains("does not exist") }
    }

    @Test func theStatusLineSaysWhatPeopleAskAbout() {
        let speaker = CallStatistics.Speaker(
            identity: "bob", ssrc: 1, packetsReceived: 100, packetsLost: 5, lossPercent: 4.8, fecRecoveredFrames: 3, fecRecoveredPercent: 3,
            concealedFrames: 2, concealedPercent: 2, underruns: 0, latePackets: 0, duplicatePackets: 0, jitterBufferDelayMilliseconds: 62,
            jitterBufferTargetMilliseconds: 60, networkJitterMilliseconds: 4, restarts: 0, audioFrames: 105, meanJitterBufferDelayMilliseconds: 61, receiving: true)
        let statistics = CallStatistics(
            name: "ada", identity: "ada", room: "standup", phase: .inCall, elapsedSeconds: 75, members: ["ada", "bob", "cy"], speaking: ["bob"],
            roundTripMilliseconds: 12.4, lossUpPercent: 0, lossUpTotalPercent: 0.5, lossDownPercent: 4.8,
            jitterBufferDelayMilliseconds: 62, concealedPercent: 1.2, bitrate: 28_000, expectedLossPercent: 6, captureXruns: 1, playbackXruns: 0,
            rejoins: 0, packetsSent: 3_000, bytesSent: 240_000, captureStartedAtNanoseconds: nil, playbackStartedAtNanoseconds: nil, speakers: [speaker])
        let line = CallStatusLine.line(statistics)
        print(line)
        for part in ["ada", "1:15", "3 in room", "speaking: bob", "rtt 12 ms", "loss up 0.0% down 4.8%", "jb 62 ms", "concealed 1.2%", "28 kb/s", "xruns 1"] {
            #expect(line.contains(part), "\(part) missing from: \(line)")
        }
        let summary = CallStatusLine.summary(statistics)
        print(summary)
        #expect(summary.contains("from bob: 100 packets, lost 4.8% on the way, 0 late; of 105 frames due, FEC rebuilt 3.0% (3), "
            + "redundant copies 0.0% (0), concealed 2.0% (2)"), "what the network did, then what became of the frames due, with counts")
        // A quiet member: one frame rebuilt of 53 due, after one late packet and no loss, says so.
        var quiet = statistics
        quiet.speakers[0] = CallStatistics.Speaker(
            identity: "cy", ssrc: 2, packetsReceived: 53, packetsLost: 0, lossPercent: 0, fecRecoveredFrames: 1, fecRecoveredPercent: 100.0 / 53,
            concealedFrames: 0, concealedPercent: 0, underruns: 0, latePackets: 1, duplicatePackets: 0, jitterBufferDelayMilliseconds: 40,
            jitterBufferTargetMilliseconds: 40, networkJitterMilliseconds: 2, restarts: 0, audioFrames: 53, meanJitterBufferDelayMilliseconds: nil, receiving: false)
        #expect(CallStatusLine.summary(quiet).contains("lost 0.0% on the way, 1 late; of 53 frames due, FEC rebuilt 1.9% (1)"))
        var reconnecting = statistics
        reconnecting.phase = .reconnecting
        #expect(CallStatusLine.line(reconnecting).contains("reconnecting"))
    }
}
