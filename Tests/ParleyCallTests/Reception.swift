import Foundation
import ParleyClient
import ParleyEvaluation

/// What one listener got of one talker, measured from the listener's recording.
struct Reception: Sendable, CustomStringConvertible {
    let talker: String
    let listener: String
    let comparison: SpeechComparison
    /// Mouth-to-ear delays of the windows that start after `settle` seconds, sorted, ms.
    let settledDelays: [Double]

    /// Compares every listener's recording of every other talker, on a thread of its own:
    /// the comparisons take seconds of CPU in a debug build, and on the shared task pool
    /// they would hold up the other calls' tasks (a restart timed with `Task.sleep` came
    /// seconds late behind them).
    static func all(in room: CallRoom, outcome: CallOutcome, conversation: Conversation, settleSeconds: Double = 3) async throws -> [Reception] {
        try await all(recordings: room.received(by:from:), outcome: outcome, conversation: conversation, settleSeconds: settleSeconds)
    }

    /// `recordings(listener, talker)`: what the listener recorded of the talker.
    static func all(
        recordings: @escaping @Sendable (String, String) throws -> [Float], outcome: CallOutcome, conversation: Conversation,
        settleSeconds: Double = 3
    ) async throws -> [Reception] {
        try await runOnThread {
            Result { try compareAll(recordings: recordings, outcome: outcome, conversation: conversation, settleSeconds: settleSeconds) }
        }.get()
    }

    private static func compareAll(
        recordings: (String, String) throws -> [Float], outcome: CallOutcome, conversation: Conversation, settleSeconds: Double
    ) throws -> [Reception] {
        var receptions: [Reception] = []
        for listener in Conversation.talkers {
            for talker in Conversation.talkers where talker != listener {
                guard let offset = outcome.offset(talker: talker, listener: listener) else {
                    throw Conversation.Unavailable(description: "\(talker) never captured or \(listener) never played")
                }
                let recording = try recordings(listener, talker)
                let comparison = SpeechComparison.compare(sent: conversation.tracks[talker]!, received: recording, offset: offset)
                let settled = comparison.windows.filter { Double($0.start) / 48_000 >= settleSeconds }
                    .compactMap { $0.delay.map { $0 / 48 } }.sorted()
                receptions.append(Reception(talker: talker, listener: listener, comparison: comparison, settledDelays: settled))
            }
        }
        return receptions
    }

    func percentile(_ fraction: Double, of sorted: [Double]) -> Double {
        guard !sorted.isEmpty else { return .infinity }
        return sorted[min(sorted.count - 1, Int((fraction * Double(sorted.count - 1)).rounded()))]
    }

    var settledP95: Double { percentile(0.95, of: settledDelays) }
    var delayMedian: Double { comparison.delayPercentile(0.5) ?? .infinity }
    var delayMax: Double { comparison.delaysMilliseconds.last ?? .infinity }

    /// Each window's delay and match, for a closer look (printed when PARLEY_CALL_TEST_WINDOWS is set).
    var windowTrace: String {
        comparison.windows.map { window in
            String(format: "    %5.2f s  %@  match %.2f", Double(window.start) / 48_000,
                   window.delay.map { String(format: "%6.0f ms", $0 / 48) } ?? "     –   ", window.match)
        }.joined(separator: "\n")
    }

    var description: String {
        let joinedLate = comparison.audibleFromSample >= 4_800
            ? String(format: " (%@ joined %.1f s into %@'s track; judged from there)", listener, Double(comparison.audibleFromSample) / 48_000, talker) : ""
        return String(format: "%@ → %@: envelope %.3f, dropped %4.1f%% of %d speech frames in %d dropouts, %d unmatched windows; delay median %3.0f ms, settled p95 %3.0f ms, max %3.0f ms%@",
                      talker, listener, comparison.envelopeCorrelation, comparison.droppedPercent, comparison.activeFrames,
                      comparison.dropouts, comparison.unmatchedWindows, delayMedian, settledP95, delayMax, joinedLate)
    }
}
