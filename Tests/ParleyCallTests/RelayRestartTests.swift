import Foundation
import ParleyAudio
import ParleyClient
import Synchronization
import Testing

/// Acceptance 2's last case: the relay restarts in the middle of the call.
@Suite("A relay restart mid-call")
struct RelayRestartTests {
    /// The relay shuts down 5 s into the conversation (members are told goodbye) and comes
    /// back on the same port a second later. Every client says it is reconnecting, rejoins by
    /// itself exactly once and says so; the turns spoken from 3 s after the restart on are
    /// heard as well as on a clean call (envelope ≥ 0.85, no dropout) and as promptly (95% of
    /// windows within 150 ms: the jitter buffers started afresh, so the outage left no delay
    /// behind), and no listener misses more than 3.5 s of the speech around the outage.
    @Test func everyoneRejoinsAndHearsTheOthersAgain() async throws {
        let conversation = try Conversation.standard.get()
        let room = try await CallRoom(room: "restart")
        let notices = Mutex<[String: [String]]>([:])
        let restartAt = 5.0, downFor = 1.0
        let outcome = try await CallSlots.shared.withSlot {
            try await room.run(
                conversation,
                configure: { _, _ in },
                whileRunning: {
                    try await Task.sleep(for: .seconds(restartAt))
                    try await runOnThread { Result { try room.restartRelay(downFor: downFor) } }.get()
                },
                notice: { talker, message in notices.withLock { $0[talker, default: []].append(message) } })
        }
        defer { Task { await room.close() } }
        for (talker, result) in outcome.results {
            if case let .failure(error) = result { Issue.record("\(talker)'s call failed: \(error)") }
        }
        let said = notices.withLock { $0 }
        for talker in Conversation.talkers {
            let statistics = try #require(outcome.statistics[talker])
            let messages = said[talker] ?? []
            print("\(talker): rejoins \(statistics.rejoins); notices: \(messages.joined(separator: " | "))")
            #expect(statistics.rejoins == 1)
            #expect(messages.contains { $0.hasPrefix("reconnecting: the relay is restarting") })
            #expect(messages.contains { $0.hasPrefix("rejoined") })
        }

        let resumeFrom = Int((restartAt + 3) * 48_000)
        for reception in try Reception.all(in: room, outcome: outcome, conversation: conversation) {
            let track = conversation.tracks[reception.talker]!
            let after = SpectralEnvelope.activeFrames(track, in: resumeFrom..<(track.count / SpectralEnvelope.frame * SpectralEnvelope.frame))
            let score = SpectralEnvelope.correlation(reception.comparison.alignedReceived, track, frames: after)
            let delays = reception.comparison.windows.filter { $0.start >= resumeFrom }.compactMap { $0.delay.map { $0 / 48 } }.sorted()
            let p95 = delays.isEmpty ? Double.infinity : delays[Int((0.95 * Double(delays.count - 1)).rounded())]
            let missed = Double(reception.comparison.droppedFrames * SpectralEnvelope.frame) / 48_000
            print(String(format: "%@ → %@ after the restart: envelope %.3f over %d frames, delay p95 %.0f ms; speech missed overall %.2f s",
                         reception.talker, reception.listener, score, after.count, p95, missed))
            if ProcessInfo.processInfo.environment["PARLEY_CALL_TEST_WINDOWS"] != nil { print(reception.windowTrace) }
            if after.count >= 20 {
                #expect(score >= 0.85, "\(reception)")
                #expect(p95 <= 150, "\(reception)")
            }
            #expect(missed <= 3.5, "\(reception)")
        }
    }
}
