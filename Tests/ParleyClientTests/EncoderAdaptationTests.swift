import Testing
@testable import ParleyClient

/// How the sender spends its bits as loss reports come (about one a second).
@Suite("Encoder adaptation")
struct EncoderAdaptationTests {
    static let copies = EncoderAdaptation.Redundancy(distances: [1, 3])

    static func adaptation(ceiling: Int = 32_000, listenersReadRED: Bool = true) -> EncoderAdaptation {
        var configuration = EncoderAdaptation.Configuration()
        configuration.maximumBitrate = ceiling
        var adaptation = EncoderAdaptation(configuration)
        _ = adaptation.listeners(allReadRedundancy: listenersReadRED)
        return adaptation
    }

    @Test func aCleanPathGetsTheWholeBitrateForTheVoiceAndNoProtection() {
        var adaptation = Self.adaptation(ceiling: 40_000)
        #expect(adaptation.setting == .init(bitrate: 40_000, expectedLossPercent: 0, redundancy: .none), "before any report")
        for _ in 0..<20 { #expect(adaptation.report(lossFraction: 0) == nil) }
        #expect(adaptation.setting == .init(bitrate: 40_000, expectedLossPercent: 0, redundancy: .none))
    }

    /// Copies of earlier frames rebuild them whole, so while they are sent the voice keeps
    /// all its bits: no FEC.
    @Test func theFirstReportOfLossTurnsOnRedundancyAtOnceAndTheVoiceKeepsItsBitrate() {
        var adaptation = Self.adaptation()
        _ = adaptation.report(lossFraction: 0)
        #expect(adaptation.report(lossFraction: 0.004) == .init(bitrate: 32_000, expectedLossPercent: 0, redundancy: Self.copies))
        #expect(adaptation.report(lossFraction: 0.3) == nil, "more loss changes nothing: the copies already cover it")
    }

    /// Redundancy costs bandwidth, not voice quality, and the next burst is lost before a
    /// report can say so: it stays until thirty reports in a row (half a minute) are clean.
    @Test func redundancyStaysUntilThirtyCleanReportsInARow() {
        var adaptation = Self.adaptation()
        _ = adaptation.report(lossFraction: 0.1)
        for report in 1...29 {
            _ = adaptation.report(lossFraction: 0)
            #expect(adaptation.setting.redundancy == Self.copies, "clean report \(report)")
        }
        #expect(adaptation.report(lossFraction: 0) == .init(bitrate: 32_000, expectedLossPercent: 0, redundancy: .none), "the thirtieth ends it")
        #expect(adaptation.report(lossFraction: 0.01)?.redundancy == Self.copies, "and the next loss brings it back")
        for _ in 1...29 { _ = adaptation.report(lossFraction: 0) }
        _ = adaptation.report(lossFraction: 0.02)
        for _ in 1...29 { _ = adaptation.report(lossFraction: 0) }
        #expect(adaptation.setting.redundancy == Self.copies, "a loss within the thirty starts the count again")
    }

    /// A listener that cannot read RED would hear nothing of us: then in-band FEC protects
    /// instead, against the worst of the last four reports, and stops after four clean ones.
    @Test func withAListenerWhoCannotReadRedundancyFECProtectsInstead() {
        var adaptation = Self.adaptation(listenersReadRED: false)
        _ = adaptation.report(lossFraction: 0.062)
        #expect(adaptation.setting == .init(bitrate: 32_000, expectedLossPercent: 7, redundancy: .none), "rounded up, at once")
        _ = adaptation.report(lossFraction: 0.02)
        #expect(adaptation.setting.expectedLossPercent == 7, "the worst of the recent reports")
        for _ in 1...3 { _ = adaptation.report(lossFraction: 0) }
        #expect(adaptation.setting.expectedLossPercent == 2, "the 6.2 % report has left the memory")
        _ = adaptation.report(lossFraction: 0)
        #expect(adaptation.setting.expectedLossPercent == 0, "four clean reports: FEC off")
        _ = adaptation.report(lossFraction: 0.9)
        #expect(adaptation.setting.expectedLossPercent == 40, "capped")

        // Once everyone in the roster can read RED, copies take over from FEC; and back.
        #expect(adaptation.listeners(allReadRedundancy: true) == .init(bitrate: 32_000, expectedLossPercent: 0, redundancy: Self.copies))
        #expect(adaptation.listeners(allReadRedundancy: false) == .init(bitrate: 32_000, expectedLossPercent: 40, redundancy: .none))
    }

    @Test func reportsOutsideZeroToOneAreClampedNotTrusted() {
        var adaptation = Self.adaptation(listenersReadRED: false)
        _ = adaptation.report(lossFraction: .nan)
        _ = adaptation.report(lossFraction: -3)
        _ = adaptation.report(lossFraction: .infinity)
        #expect(adaptation.setting.expectedLossPercent == 0)
        _ = adaptation.report(lossFraction: 7)
        #expect(adaptation.setting.expectedLossPercent == 40)
    }
}
