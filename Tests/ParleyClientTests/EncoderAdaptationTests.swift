import Testing
@testable import ParleyClient

/// How the sender spends its bits as loss reports come (about one a second).
@Suite("Encoder adaptation")
struct EncoderAdaptationTests {
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

    @Test func theFirstReportOfLossTurnsOnFECForTheWorstRecentLossAndRedundancy() {
        var adaptation = Self.adaptation()
        _ = adaptation.report(lossFraction: 0)
        let setting = adaptation.report(lossFraction: 0.062)
        #expect(setting == .init(bitrate: 32_000, expectedLossPercent: 7, redundancy: .init(distances: [1, 2])), "rounded up, at once")
        _ = adaptation.report(lossFraction: 0.02)
        #expect(adaptation.setting.expectedLossPercent == 7, "the worst of the recent reports")
        _ = adaptation.report(lossFraction: 0.9)
        #expect(adaptation.setting.expectedLossPercent == 40, "capped")
        #expect(adaptation.setting.bitrate == 32_000, "the voice keeps its bitrate: redundancy comes on top")
    }

    /// FEC costs voice quality, so it goes once four reports in a row are clean; RED costs
    /// only bandwidth and the next burst is lost before a report can say so, so it stays
    /// ten reports longer.
    @Test func fecStopsAfterFourCleanReportsAndRedundancyAfterTen() {
        var adaptation = Self.adaptation()
        _ = adaptation.report(lossFraction: 0.1)
        for report in 1...3 {
            _ = adaptation.report(lossFraction: 0)
            #expect(adaptation.setting.expectedLossPercent == 10, "clean report \(report)")
        }
        _ = adaptation.report(lossFraction: 0)
        #expect(adaptation.setting.expectedLossPercent == 0, "four clean reports: FEC off")
        #expect(adaptation.setting.redundancy.isOn)
        for _ in 5...9 { _ = adaptation.report(lossFraction: 0) }
        #expect(adaptation.setting.redundancy.isOn, "nine clean reports")
        #expect(adaptation.report(lossFraction: 0)?.redundancy == EncoderAdaptation.Redundancy.none, "the tenth ends it")
        #expect(adaptation.report(lossFraction: 0.01)?.redundancy.isOn == true, "and the next loss brings it back")
    }

    /// A listener that cannot read RED would hear nothing of us: redundancy waits for a
    /// roster in which everyone can, and stops when one who cannot joins.
    @Test func redundancyOnlyWhileEveryListenerReadsIt() {
        var adaptation = Self.adaptation(listenersReadRED: false)
        _ = adaptation.report(lossFraction: 0.1)
        #expect(adaptation.setting == .init(bitrate: 32_000, expectedLossPercent: 10, redundancy: .none), "FEC still protects")
        #expect(adaptation.listeners(allReadRedundancy: true)?.redundancy == .init(distances: [1, 2]))
        #expect(adaptation.listeners(allReadRedundancy: false)?.redundancy == EncoderAdaptation.Redundancy.none)
    }

    @Test func reportsOutsideZeroToOneAreClampedNotTrusted() {
        var adaptation = Self.adaptation()
        _ = adaptation.report(lossFraction: .nan)
        _ = adaptation.report(lossFraction: -3)
        #expect(adaptation.setting.expectedLossPercent == 0)
        _ = adaptation.report(lossFraction: .infinity)
        #expect(adaptation.setting.expectedLossPercent == 0)
        _ = adaptation.report(lossFraction: 7)
        #expect(adaptation.setting.expectedLossPercent == 40)
    }
}
