import Testing
import ParleyNetSim

extension NetSimTests {
    @Suite("Seeded random numbers")
    struct SeededRandomTests {
        @Test func theSameSeedGivesTheSameStream() {
            var a = SeededRandom(seed: 2026)
            var b = SeededRandom(seed: 2026)
            var c = SeededRandom(seed: 2027)
            let first = (0..<1000).map { _ in a.next() }
            #expect(first == (0..<1000).map { _ in b.next() })
            #expect(first != (0..<1000).map { _ in c.next() })
        }

        @Test func uniformValuesFillTheUnitIntervalEvenly() {
            var random = SeededRandom(seed: 1)
            var buckets = [Int](repeating: 0, count: 10)
            let count = 100_000
            for _ in 0..<count {
                let value = random.nextUnitInterval()
                #expect(value >= 0 && value < 1)
                buckets[Int(value * 10)] += 1
            }
            // Each decile should hold 10,000 ± 5σ (σ = 95).
            print("uniform deciles: \(buckets)")
            #expect(buckets.allSatisfy { abs($0 - 10_000) < 475 })
        }

        @Test func gaussianValuesHaveMeanZeroAndDeviationOne() {
            var random = SeededRandom(seed: 5)
            let values = (0..<100_000).map { _ in random.nextGaussian() }
            let (mean, deviation) = meanAndDeviation(values)
            let withinOne = Double(values.filter { abs($0) < 1 }.count) / Double(values.count)
            print("gaussian: mean \(mean), deviation \(deviation), within ±1σ \(withinOne) (expected 0.683)")
            #expect(abs(mean) < 0.01)
            #expect(abs(deviation - 1) < 0.01)
            #expect(abs(withinOne - 0.6827) < 0.005)
        }

        @Test func paretoValuesFollowTheirPowerLaw() {
            // P(X > x) = (scale / x)^shape: with scale 1 and shape 2.5, P(X > 10) = 10^-2.5 ≈ 0.316%.
            var random = SeededRandom(seed: 6)
            let values = (0..<200_000).map { _ in random.nextPareto(scale: 1, shape: 2.5) }
            let beyondTen = Double(values.filter { $0 > 10 }.count) / Double(values.count)
            let beyondTwo = Double(values.filter { $0 > 2 }.count) / Double(values.count)
            print("pareto: P(X>2) \(beyondTwo) (expected 0.1768), P(X>10) \(beyondTen) (expected 0.00316)")
            #expect(values.allSatisfy { $0 >= 1 })
            #expect(relativeError(beyondTwo, 0.1768) < 0.03)
            #expect(relativeError(beyondTen, 0.003162) < 0.15)
        }

        @Test func derivedSeedsAreDistinctForEveryLabel() {
            var seeds = Set<UInt64>()
            for flow in 0..<100 as Range<UInt64> {
                for direction in 0..<2 as Range<UInt64> {
                    seeds.insert(SeededRandom.derivedSeed(7, flow, direction))
                }
            }
            #expect(seeds.count == 200)
            #expect(SeededRandom.derivedSeed(7, 1, 2) == SeededRandom.derivedSeed(7, 1, 2))
            #expect(SeededRandom.derivedSeed(7, 1, 2) != SeededRandom.derivedSeed(7, 2, 1))
            #expect(SeededRandom.derivedSeed(7, 1) != SeededRandom.derivedSeed(8, 1))
        }
    }
}
