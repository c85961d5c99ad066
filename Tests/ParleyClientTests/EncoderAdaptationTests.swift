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

    /// A report a second while talking: 50 of our packets.
    static let talking = 50

    /// Before the path is known the first words go out with copies (on top of the voice's
    /// bitrate); 5 s of speech reported clean ends them, and clean reports keep them off.
    @Test func aCleanPathGetsTheWholeBitrateForTheVoiceAndNoProtectionOnceKnown() {
        var adaptation = Self.adaptation(ceiling: 40_000)
        #expect(adaptation.setting == .init(bitrate: 40_000, expectedLossPercent: 0, redundancy: Self.copies), "before any report")
        for report in 1...4 {
            #expect(adaptation.report(lossFraction: 0, packets: Self.talking) == nil, "clean report \(report) of 5")
        }
        #expect(adaptation.report(lossFraction: 0, packets: Self.talking) == .init(bitrate: 40_000, expectedLossPercent: 0, redundancy: .none),
                "250 packets clean: the path is known")
        for _ in 0..<20 { #expect(adaptation.report(lossFraction: 0, packets: Self.talking) == nil) }
        #expect(adaptation.setting == .init(bitrate: 40_000, expectedLossPercent: 0, redundancy: .none))
    }

    /// A silent talker's reports cover a few DTX packets each: many clean ones are not yet
    /// evidence that the path is clean, so the copies are still on when the words come.
    @Test func silenceReportedCleanIsNotEvidenceOfACleanPath() {
        var adaptation = Self.adaptation()
        for _ in 0..<30 { _ = adaptation.report(lossFraction: 0, packets: 3) }
        #expect(adaptation.setting.redundancy == Self.copies, "30 reports of 3 packets: 90 of the 250")
        _ = adaptation.report(lossFraction: 0.1, packets: 3)
        for _ in 0..<100 { _ = adaptation.report(lossFraction: 0, packets: 3) }
        #expect(adaptation.setting.redundancy == Self.copies, "after a loss, 300 of the 1,500")
    }

    /// Without listeners who read RED, the unknown path gets nothing: FEC would take its
    /// bits from the voice before any loss is known.
    @Test func beforeAnyReportAListenerWhoCannotReadRedundancyGetsPlainVoice() {
        let adaptation = Self.adaptation(listenersReadRED: false)
        #expect(adaptation.setting == .init(bitrate: 32_000, expectedLossPercent: 0, redundancy: .none))
    }

    /// Copies of earlier frames rebuild them whole, so while they are sent the voice keeps
    /// all its bits: no FEC.
    @Test func aReportOfLossTurnsOnRedundancyAtOnceAndTheVoiceKeepsItsBitrate() {
        var adaptation = Self.adaptation()
        for _ in 0..<5 { _ = adaptation.report(lossFraction: 0, packets: Self.talking) }
        #expect(adaptation.setting.redundancy == .none)
        #expect(adaptation.report(lossFraction: 0.004, packets: Self.talking) == .init(bitrate: 32_000, expectedLossPercent: 0, redundancy: Self.copies))
        #expect(adaptation.report(lossFraction: 0.3, packets: Self.talking) == nil, "more loss changes nothing: the copies already cover it")
    }

    /// Redundancy costs bandwidth, not voice quality, and the next burst is lost before a
    /// report can say so: it stays until 1,500 of our packets (30 s of speech) in a row are
    /// reported clean.
    @Test func redundancyStaysUntilThirtySecondsOfSpeechReportedClean() {
        var adaptation = Self.adaptation()
        _ = adaptation.report(lossFraction: 0.1, packets: Self.talking)
        for report in 1...29 {
            _ = adaptation.report(lossFraction: 0, packets: Self.talking)
            #expect(adaptation.setting.redundancy == Self.copies, "clean report \(report)")
        }
        #expect(adaptation.report(lossFraction: 0, packets: Self.talking) == .init(bitrate: 32_000, expectedLossPercent: 0, redundancy: .none),
                "the thirtieth ends it")
        #expect(adaptation.report(lossFraction: 0.01, packets: Self.talking)?.redundancy == Self.copies, "and the next loss brings it back")
        for _ in 1...29 { _ = adaptation.report(lossFraction: 0, packets: Self.talking) }
        _ = adaptation.report(lossFraction: 0.02, packets: Self.talking)
        for _ in 1...29 { _ = adaptation.report(lossFraction: 0, packets: Self.talking) }
        #expect(adaptation.setting.redundancy == Self.copies, "a loss within the thirty starts the count again")
    }

    /// Nothing a report says can overflow the count: a huge or negative packet count is clamped.
    @Test func packetCountsAreClampedNotTrusted() {
        var adaptation = Self.adaptation()
        _ = adaptation.report(lossFraction: 0.1, packets: 1)
        _ = adaptation.report(lossFraction: 0, packets: -5)
        #expect(adaptation.setting.redundancy == Self.copies)
        for _ in 0..<3 { _ = adaptation.report(lossFraction: 0, packets: .max) }
        #expect(adaptation.setting.redundancy == .none)
    }

    /// A listener that cannot read RED would hear nothing of us: then in-band FEC protects
    /// instead, against the worst of the last four reports, and stops after four clean ones.
    @Test func withAListenerWhoCannotReadRedundancyFECProtectsInstead() {
        var adaptation = Self.adaptation(listenersReadRED: false)
        _ = adaptation.report(lossFraction: 0.062, packets: Self.talking)
        #expect(adaptation.setting == .init(bitrate: 32_000, expectedLossPercent: 7, redundancy: .none), "rounded up, at once")
        _ = adaptation.report(lossFraction: 0.02, packets: Self.talking)
        #expect(adaptation.setting.expectedLossPercent == 7, "the worst of the recent reports")
        for _ in 1...3 { _ = adaptation.report(lossFraction: 0, packets: Self.talking) }
        #expect(adaptation.setting.expectedLossPercent == 2, "the 6.2 % report has left the memory")
        _ = adaptation.report(lossFraction: 0, packets: Self.talking)
        #expect(adaptation.setting.expectedLossPercent == 0, "four clean reports: FEC off")
        _ = adaptation.report(lossFraction: 0.9, packets: Self.talking)
        #expect(adaptation.setting.expectedLossPercent == 40, "capped")

        // Once everyone in the roster can read RED, copies take over from FEC; and back.
        #expect(adaptation.listeners(allReadRedundancy: true) == .init(bitrate: 32_000, expectedLossPercent: 0, redundancy: Self.copies))
        #expect(adaptation.listeners(allReadRedundancy: false) == .init(bitrate: 32_000, expectedLossPercent: 40, redundancy: .none))
    }

    @Test func reportsOutsideZeroToOneAreClampedNotTrusted() {
        var adaptation = Self.adaptation(listenersReadRED: false)
        _ = adaptation.report(lossFraction: .nan, packets: Self.talking)
        _ = adaptation.report(lossFraction: -3, packets: Self.talking)
        _ = adaptation.report(lossFraction: .infinity, packets: Self.talking)
        #expect(adaptation.setting.expectedLossPercent == 0)
        _ = adaptation.report(lossFraction: 7, packets: Self.talking)
        #expect(adaptation.setting.expectedLossPercent == 40)
    }
}
