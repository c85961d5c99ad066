import Testing
import ParleyNetSim

extension NetSimTests {
    /// Acceptance 1: over 100,000 packets with fixed seeds, the measured loss rate is within
    /// ±10% (relative) of the set rate and the Gilbert–Elliott mean burst length within ±15%.
    /// The test measures the sequence of fates itself, then checks the model's own report
    /// agrees.
    @Suite("Loss models")
    struct LossModelTests {
        static let packets = 100_000

        @Test(arguments: [0.01, 0.05, 0.10, 0.20, 0.50])
        func independentLossHitsTheSetRate(rate: Double) {
            var model = LossModel(rate: rate, seed: 0x10_55)
            let fates = (0..<Self.packets).map { _ in model.losesNextPacket() }
            let measured = Double(fates.filter { $0 }.count) / Double(Self.packets)
            print("independent loss: set \(rate), measured \(measured), relative error \(relativeError(measured, rate)) (limit 0.10)")
            #expect(relativeError(measured, rate) <= 0.10)
            #expect(model.report.lossRate == measured)
            #expect(model.report.packets == Self.packets)
        }

        @Test func independentLossComesInTheShortBurstsChanceGives() {
            // With independent loss at rate r, a run of losses continues with probability r,
            // so runs average 1 / (1 − r) packets: 1.25 at 20%.
            var model = LossModel(rate: 0.2, seed: 7)
            let runs = lossRuns((0..<Self.packets).map { _ in model.losesNextPacket() })
            let mean = Double(runs.reduce(0, +)) / Double(runs.count)
            print("independent 20%: mean run \(mean) (expected 1.25 ± 5%)")
            #expect(relativeError(mean, 1.25) <= 0.05)
        }

        @Test(arguments: [(0.10, 3.0), (0.05, 2.0), (0.20, 5.0), (0.02, 1.5), (0.30, 8.0)])
        func gilbertElliottHitsTheSetRateAndMeanBurstLength(rate: Double, burst: Double) {
            var model = LossModel(rate: rate, meanBurstLength: burst, seed: 0xB0_2575)
            let fates = (0..<Self.packets).map { _ in model.losesNextPacket() }
            let measuredRate = Double(fates.filter { $0 }.count) / Double(Self.packets)
            let runs = lossRuns(fates)
            let measuredBurst = Double(runs.reduce(0, +)) / Double(runs.count)
            print(
                "Gilbert–Elliott \(rate)/\(burst): loss \(measuredRate) (error \(relativeError(measuredRate, rate)), limit 0.10), "
                    + "mean burst \(measuredBurst) (error \(relativeError(measuredBurst, burst)), limit 0.15)")
            #expect(relativeError(measuredRate, rate) <= 0.10)
            #expect(relativeError(measuredBurst, burst) <= 0.15)
            #expect(model.report.meanBurstLength == measuredBurst)
            #expect(model.report.bursts == runs.count)
            #expect(model.report.longestBurst == runs.max())
        }

        @Test func burstLossIsBurstierThanIndependentLossAtTheSameRate() {
            var bursty = LossModel(rate: 0.1, meanBurstLength: 3, seed: 3)
            var independent = LossModel(rate: 0.1, seed: 3)
            for _ in 0..<Self.packets {
                _ = bursty.losesNextPacket()
                _ = independent.losesNextPacket()
            }
            print("longest burst: bursty \(bursty.report.longestBurst), independent \(independent.report.longestBurst)")
            #expect(bursty.report.meanBurstLength > 2 * independent.report.meanBurstLength)
            #expect(bursty.report.longestBurst > independent.report.longestBurst)
        }

        @Test func theSameSeedLosesTheSamePacketsAndAnotherSeedOthers() {
            func fates(seed: UInt64, burst: Double?) -> [Bool] {
                var model = burst.map { LossModel(rate: 0.1, meanBurstLength: $0, seed: seed) } ?? LossModel(rate: 0.1, seed: seed)
                return (0..<10_000).map { _ in model.losesNextPacket() }
            }
            for burst in [nil, 3.0] {
                #expect(fates(seed: 42, burst: burst) == fates(seed: 42, burst: burst))
                #expect(fates(seed: 42, burst: burst) != fates(seed: 43, burst: burst))
            }
        }

        @Test func noLossAndTotalLossAreExact() {
            var none = LossModel(rate: 0, seed: 1)
            var all = LossModel(rate: 1, seed: 1)
            let fates = (0..<1000).map { _ in (none.losesNextPacket(), all.losesNextPacket()) }
            #expect(fates.allSatisfy { !$0.0 && $0.1 })
        }

        @Test func burstsCannotBeShorterThanTheLossRateAllows() {
            // Between bursts at least one packet arrives, so bursts of mean b allow at most b / (b + 1).
            #expect(LossModel.maximumRate(meanBurstLength: 3) == 0.75)
            #expect(LossModel.isPossible(rate: 0.75, meanBurstLength: 3))
            #expect(!LossModel.isPossible(rate: 0.76, meanBurstLength: 3))
            #expect(!LossModel.isPossible(rate: 0.1, meanBurstLength: 0.5))
            var model = LossModel(rate: 0.75, meanBurstLength: 3, seed: 9)
            for _ in 0..<Self.packets { _ = model.losesNextPacket() }
            print("loss at the limit 75%/3: \(model.report.lossRate), mean burst \(model.report.meanBurstLength)")
            #expect(relativeError(model.report.lossRate, 0.75) <= 0.10)
        }
    }
}
