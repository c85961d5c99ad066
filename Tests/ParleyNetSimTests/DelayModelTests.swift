import Testing
import ParleyNetSim

extension NetSimTests {
    /// Delay, jitter, reordering and spikes, measured from the arrivals themselves.
    @Suite("Delay and jitter")
    struct DelayModelTests {
        static let packets = 100_000

        /// Copies that arrive after a packet sent later, counted from the arrival order alone.
        static func reorderedCount(_ arrivals: [Arrival]) -> Int {
            var latestSent = -1
            var reordered = 0
            for arrival in arrivals {
                if arrival.packet < latestSent { reordered += 1 }
                latestSent = max(latestSent, arrival.packet)
            }
            return reordered
        }

        @Test(arguments: [10, 20, 40])
        func jitterStandardDeviationMatchesTheSetJitter(jitterMilliseconds: Int) {
            let jitter = Double(jitterMilliseconds)
            var pipeline = ImpairmentPipeline(
                impairment {
                    $0.delay = .milliseconds(150)
                    $0.jitter = .milliseconds(jitterMilliseconds)
                    $0.reorder = true
                }, seed: 0x717)
            let delays = run(&pipeline, count: Self.packets).map { milliseconds($0.delay) }
            let (mean, deviation) = meanAndDeviation(delays)
            print("jitter \(jitter) ms: mean \(mean) ms (limit 150 ± 5%), deviation \(deviation) ms (limit ±15%)")
            #expect(delays.count == Self.packets)
            #expect(relativeError(mean, 150) <= 0.05)
            #expect(relativeError(deviation, jitter) <= 0.15)
            // The model's own report agrees with what the test measured.
            let report = pipeline.report.delay
            #expect(abs(report.mean.inMilliseconds - mean) < 0.01)
            #expect(abs(report.standardDeviation.inMilliseconds - deviation) < 0.01)
        }

        @Test func reorderingOccursExactlyWhenEnabled() {
            for reorder in [false, true] {
                var pipeline = ImpairmentPipeline(
                    impairment {
                        $0.delay = .milliseconds(100)
                        $0.jitter = .milliseconds(40)
                        $0.reorder = reorder
                    }, seed: 0x0DE)
                let arrivals = run(&pipeline, count: Self.packets)
                let reordered = Self.reorderedCount(arrivals)
                print("reorder \(reorder): \(reordered) of \(arrivals.count) arrived after a later packet (model says \(pipeline.report.reordered))")
                #expect(pipeline.report.reordered == reordered)
                if reorder {
                    // Packets 20 ms apart with 40 ms of jitter overtake each other often: about one in two.
                    #expect(reordered > Self.packets / 3)
                } else {
                    #expect(reordered == 0)
                    #expect(arrivals.map(\.packet) == Array(0..<Self.packets))
                }
            }
        }

        @Test func withoutReorderingAPacketQueuesBehindADelayedOne() {
            // A FIFO path: nobody arrives before the packet ahead, so delays only grow from
            // the sampled ones; the mean rises and the spread narrows.
            var fifo = ImpairmentPipeline(
                impairment {
                    $0.delay = .milliseconds(40)
                    $0.jitter = .milliseconds(20)
                }, seed: 11)
            let arrivals = run(&fifo, count: Self.packets)
            let (mean, deviation) = meanAndDeviation(arrivals.map { milliseconds($0.delay) })
            print("FIFO 40 ± 20 ms at 50 packets/s: mean \(mean) ms, deviation \(deviation) ms")
            #expect(zip(arrivals, arrivals.dropFirst()).allSatisfy { $0.arrived <= $1.arrived })
            #expect(mean > 43 && mean < 46)
            #expect(deviation > 15.5 && deviation < 18.5)
        }

        @Test func paretoJitterHasTheSetMeanAndAHeavyTail() {
            func delays(_ distribution: JitterDistribution) -> (mean: Double, minimum: Double, p999: Double) {
                var pipeline = ImpairmentPipeline(
                    impairment {
                        $0.delay = .milliseconds(100)
                        $0.jitter = .milliseconds(10)
                        $0.jitterDistribution = distribution
                        $0.reorder = true
                    }, seed: 0x9A2E70)
                let sorted = run(&pipeline, count: Self.packets).map { milliseconds($0.delay) }.sorted()
                return (sorted.reduce(0, +) / Double(sorted.count), sorted[0], sorted[sorted.count * 999 / 1000])
            }
            let pareto = delays(.pareto)
            let normal = delays(.normal)
            print("pareto 100 ± 10 ms: mean \(pareto.mean), min \(pareto.minimum), p99.9 \(pareto.p999); normal p99.9 \(normal.p999)")
            #expect(relativeError(pareto.mean, 100) <= 0.01)
            // The floor sits 0.45 × jitter below the mean; one packet in a thousand is 9.5 × jitter late.
            #expect(pareto.minimum >= 100 - 4.48)
            #expect(pareto.minimum < 100 - 4.0)
            #expect(relativeError(pareto.p999 - 100, 95) <= 0.15)
            #expect(relativeError(normal.p999 - 100, 30.9) <= 0.15)
        }

        @Test func delaysAreNeverNegative() {
            var pipeline = ImpairmentPipeline(
                impairment {
                    $0.delay = .milliseconds(5)
                    $0.jitter = .milliseconds(20)
                    $0.reorder = true
                }, seed: 4)
            let arrivals = run(&pipeline, count: 10_000)
            let atZero = arrivals.filter { $0.delay == 0 }.count
            print("5 ± 20 ms: \(atZero) of \(arrivals.count) clamped to zero delay")
            #expect(arrivals.allSatisfy { $0.delay >= 0 })
            #expect(atZero > 3_000)
        }

        @Test func spikesHoldPacketsSentDuringTheirWindow() {
            // 300 ms more for 1 s every 5 s: packets sent 5–6 s, 10–11 s, … after the first one.
            let spike = DelaySpike(extraDelay: .milliseconds(300), every: .seconds(5))
            var pipeline = ImpairmentPipeline(
                impairment {
                    $0.delay = .milliseconds(20)
                    $0.spike = spike
                    $0.reorder = true
                }, seed: 1)
            let arrivals = run(&pipeline, count: 1_500).sorted { $0.packet < $1.packet }
            for arrival in arrivals {
                let sentSeconds = Double(arrival.sent) / 1e9
                let inSpike = sentSeconds >= 5 && sentSeconds.truncatingRemainder(dividingBy: 5) < 1
                #expect(milliseconds(arrival.delay) == (inSpike ? 320 : 20), "packet sent at \(sentSeconds) s")
            }
            let spiked = arrivals.filter { $0.delay > 20_000_000 }.count
            print("spike-300 over 30 s: \(spiked) of \(arrivals.count) packets held 300 ms more (expected 250)")
            #expect(spiked == 5 * 50)
        }

        @Test func withoutReorderingPacketsAfterASpikeQueueBehindIt() {
            var pipeline = ImpairmentPipeline(
                impairment {
                    $0.delay = .milliseconds(20)
                    $0.spike = DelaySpike(extraDelay: .milliseconds(300), every: .seconds(5))
                }, seed: 1)
            let arrivals = run(&pipeline, count: 400)
            // The last packet of the spike (sent at 5.98 s) arrives at 6.30 s; the 15 sent
            // after it up to 6.28 s would arrive earlier, so they wait and arrive with it.
            let burst = arrivals.filter { $0.arrived == 6_300_000_000 }
            print("after the spike \(burst.count) packets arrive together at 6.30 s")
            #expect(burst.count == 1 + 15)
            #expect(arrivals.map(\.packet) == Array(0..<400))
        }
    }
}
