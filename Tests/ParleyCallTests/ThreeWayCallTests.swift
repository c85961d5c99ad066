import Foundation
import ParleyClient
import Testing

/// Acceptance 1: three people talk through a relay on 127.0.0.1 and each hears both others.
@Suite("A three-way call through the relay")
struct ThreeWayCallTests {
    /// Every listener's recording of every talker, aligned with what the talker said, keeps
    /// the talker's spectral envelope (correlation ≥ 0.85: Opus at 24 kb/s alone scores about
    /// 0.9 on this speech; a missing syllable or a different talker pulls it far lower), with
    /// no dropout, and arrives within 100 ms of being spoken once the jitter buffers have
    /// settled on the loopback's jitter (windows after the first 3 s, 95th percentile).
    @Test func everyoneHearsBothOthersPromptlyAndIntact() async throws {
        let conversation = try Conversation.standard.get()
        let room = try await CallRoom(room: "three-way")
        defer { Task { await room.close() } }
        let outcome = try await CallSlots.shared.withSlot { try await room.run(conversation) }
        for (talker, result) in outcome.results {
            if case let .failure(error) = result { Issue.record("\(talker)'s call failed: \(error)") }
        }
        let receptions = try await Reception.all(in: room, outcome: outcome, conversation: conversation)
        for reception in receptions {
            print("clean loopback: \(reception)")
            #expect(reception.comparison.envelopeCorrelation >= 0.85, "\(reception)")
            #expect(reception.comparison.dropouts == 0, "\(reception)")
            #expect(reception.comparison.unmatchedWindows == 0, "\(reception)")
            #expect(reception.settledP95 <= 100, "\(reception)")
        }
        for (talker, statistics) in outcome.statistics {
            print("\(talker): \(CallStatusLine.summary(statistics))")
            #expect(statistics.members.count == 3 || statistics.phase == .ended, "\(talker) saw \(statistics.members)")
            #expect(Set(statistics.speakers.map(\.identity)) == Set(Conversation.talkers).subtracting([talker]))
        }
    }
}
