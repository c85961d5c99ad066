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

        /// Sorted delays in milliseconds.
        static func sortedDelays(_ arrivals: [Arrival]) -> [Double] {
            arrivals.map { milliseconds($0.delay) }.sorted()
        }

        static func percentile(_ sorted: [Double], _ percent: Double) -> Double {
            sorted[min(sorted.count - 1, Int(Double(sorted.count) * percent / 100))]
        }

        struct Setting: Sendable, CustomTestStringConvertible {
            let delay: Int
            let jitter: Int
            let distribution: JitterDistribution
            let reorder: Bool

            var testDescription: String {
                "\(delay) ms ± \(jitter) ms \(distribution.rawValue)\(reorder ? ", reordering" : ", in order")"
            }
        }

        /// Every shape, with and without reordering, at delays from 2 to 40 times the packet
        /// spacing's share of jitter; the smallest delay each shape allows is in the grid too.
        static let grid: [Setting] = [JitterDistribution.normal, .pareto].flatMap { distribution in
            [false, true].flatMap { reorder in
                [(30, 10), (120, 40), (10, 2), (150, 5), (distribution == .normal ? 40 : 10, 20)].map {
                    Setting(delay: $0.0, jitter: $0.1, distribution: distribution, reorder: reorder)
                }
            }
        }

        /// The promise of `--delay` and `--jitter`: the delivered one-way delay's mean and
        /// standard deviation are the flags', whatever the shape and with or without
        /// reordering, and a path without reordering keeps its packets in order by itself.
        @Test(arguments: grid)
        func deliveredDelayHasTheFlagsMeanAndDeviation(_ setting: Setting) {
            var pipeline = ImpairmentPipeline(
                impairment {
                    $0.delay = .milliseconds(setting.delay)
                    $0.jitter = .milliseconds(setting.jitter)
                    $0.jitterDistribution = setting.distribution
                    $0.reorder = setting.reorder
                }, seed: 0x717 &+ UInt64(setting.delay * 1000 + setting.jitter))
            let arrivals = run(&pipeline, count: Self.packets)
            let (mean, deviation) = meanAndDeviation(arrivals.map { milliseconds($0.delay) })
            let report = pipeline.delay!.report
            print("\(setting.testDescription): delivered \(mean) ± \(deviation) ms, \(report.reordered) reordered, \(report.heldBehind) held")
            #expect(arrivals.count == Self.packets)
            #expect(relativeError(mean, Double(setting.delay)) <= 0.05, "mean \(mean) ms")
            #expect(relativeError(deviation, Double(setting.jitter)) <= 0.05, "deviation \(deviation) ms")
            if setting.reorder {
                // Independent delays: a packet overtakes the one 20 ms ahead whenever their
                // delays differ by more than that, which happens unless the jitter is small.
                #expect((report.reordered > 0) == (setting.jitter >= 5))
            } else {
                #expect(arrivals.map(\.packet) == Array(0..<Self.packets))
                #expect(report.heldBehind == 0, "the jitter alone never asks a packet to overtake")
            }
            // The model's own report agrees with what the test measured.
            #expect(abs(report.delay.mean.inMilliseconds - mean) < 0.01)
            #expect(abs(report.delay.standardDeviation.inMilliseconds - deviation) < 0.01)
        }

        @Test func aFastFlowInOrderStillGetsTheFlagsDelay() {
            // `--delay 30ms --jitter 10ms` at 500 packets a second: packets 2 ms apart, in order.
            // Holding each behind the latest of its predecessors' independent samples would
            // deliver about 39 ms ± 6.4 ms here.
            var pipeline = ImpairmentPipeline(
                impairment {
                    $0.delay = .milliseconds(30)
                    $0.jitter = .milliseconds(10)
                }, seed: 11)
            let arrivals = run(&pipeline, count: Self.packets, interval: .milliseconds(2))
            let (mean, deviation) = meanAndDeviation(arrivals.map { milliseconds($0.delay) })
            print("30 ms ± 10 ms in order at 500 packets/s: \(mean) ± \(deviation) ms")
            #expect(abs(mean - 30) < 1 && abs(deviation - 10) < 0.5)
            #expect(zip(arrivals, arrivals.dropFirst()).allSatisfy { $0.arrived <= $1.arrived && $0.packet < $1.packet })
        }

        @Test(arguments: JitterDistribution.allCases)
        func theDelayDependsOnTimeNotOnHowManyPacketsSampleIt(_ distribution: JitterDistribution) {
            // The same path at 50 and at 500 packets a second: same delays, and no packet
            // 2 ms behind another ever has to wait for it.
            func delivered(interval: Duration, count: Int) -> (mean: Double, deviation: Double, held: Int) {
                var pipeline = ImpairmentPipeline(
                    impairment {
                        $0.delay = .milliseconds(60)
                        $0.jitter = .milliseconds(15)
                        $0.jitterDistribution = distribution
                    }, seed: 0x5A7E)
                let arrivals = run(&pipeline, count: count, interval: interval)
                let (mean, deviation) = meanAndDeviation(arrivals.map { milliseconds($0.delay) })
                return (mean, deviation, pipeline.delay!.report.heldBehind)
            }
            let voice = delivered(interval: .milliseconds(20), count: 50_000)
            let dense = delivered(interval: .milliseconds(2), count: 500_000)
            print("\(distribution) 60 ± 15 ms over 1000 s: 50 pps \(voice), 500 pps \(dense)")
            #expect(voice.held == 0 && dense.held == 0)
            #expect(abs(voice.mean - dense.mean) < 1.5 && abs(voice.deviation - dense.deviation) < 1.5)
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

        @Test func inOrderNormalJitterIsSmoothAsAQueueIs() {
            // Neighbours' delays are close (what a queue does to packets sent close together),
            // and the delay forgets its past within a few jitters.
            var pipeline = ImpairmentPipeline(
                impairment {
                    $0.delay = .milliseconds(60)
                    $0.jitter = .milliseconds(10)
                }, seed: 21)
            let delays = run(&pipeline, count: Self.packets).map { milliseconds($0.delay) }
            let (mean, deviation) = meanAndDeviation(delays)
            func correlation(lag: Int) -> Double {
                zip(delays, delays.dropFirst(lag)).reduce(0) { $0 + ($1.0 - mean) * ($1.1 - mean) }
                    / Double(delays.count - lag) / (deviation * deviation)
            }
            let steps = zip(delays, delays.dropFirst()).map { $1 - $0 }
            print("60 ± 10 ms in order: correlation 20 ms apart \(correlation(lag: 1)), 200 ms apart \(correlation(lag: 10)); "
                + "steepest fall between packets \(steps.min()!) ms, rise \(steps.max()!) ms")
            #expect(correlation(lag: 1) > 0.6)
            #expect(abs(correlation(lag: 10)) < 0.1)
            #expect(steps.min()! >= -20.001, "a fall faster than time would reorder")
        }

        @Test func paretoJitterIsAQueueWithAFloorAndABoundedTail() {
            // 100 ± 10 ms: half the packets find the queue empty and arrive at the floor, 4.9 ms
            // below the mean; the tail is the one of queueing behind bursts, and bounded.
            for reorder in [false, true] {
                var pipeline = ImpairmentPipeline(
                    impairment {
                        $0.delay = .milliseconds(100)
                        $0.jitter = .milliseconds(10)
                        $0.jitterDistribution = .pareto
                        $0.reorder = reorder
                    }, seed: 0x9A2E70)
                let sorted = Self.sortedDelays(run(&pipeline, count: 400_000))
                let floor = sorted[0]
                let atFloor = Double(sorted.prefix { $0 < floor + 0.001 }.count) / Double(sorted.count)
                let (p90, p99, p999) = (Self.percentile(sorted, 90), Self.percentile(sorted, 99), Self.percentile(sorted, 99.9))
                print("pareto 100 ± 10 ms, reorder \(reorder): floor \(floor) ms (\(atFloor) of packets), "
                    + "p90 \(p90), p99 \(p99), p99.9 \(p999), max \(sorted.last!) ms")
                #expect(abs(floor - (100 - 4.87)) < 0.01)
                #expect(abs(atFloor - 0.5) < 0.02)
                #expect(abs(p90 - 111.5) < 1.5)
                #expect(abs(p99 - 140) < 4)
                #expect(abs(p999 - 168) < 8)
                #expect(sorted.last! <= 100 + 95.2, "the queue holds at most 10 jitters")
            }
        }

        @Test func aHeavyTailNeverStallsAnInOrderPathForSeconds() {
            // 15 ms ± 20 ms pareto, for an hour of voice: the longest any packet takes is the
            // queue's bound, and arrivals are never further apart than that.
            var pipeline = ImpairmentPipeline(
                impairment {
                    $0.delay = .milliseconds(15)
                    $0.jitter = .milliseconds(20)
                    $0.jitterDistribution = .pareto
                }, seed: 0x57A11)
            let arrivals = run(&pipeline, count: 180_000)
            let longest = arrivals.map { milliseconds($0.delay) }.max()!
            let longestGap = zip(arrivals, arrivals.dropFirst()).map { milliseconds($1.arrived - $0.arrived) }.max()!
            print("15 ± 20 ms pareto over an hour: longest delay \(longest) ms, longest gap between arrivals \(longestGap) ms")
            #expect(longest <= 15 - 9.74 + 200)
            #expect(longestGap <= 220)
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

        @Test func withoutReorderingPacketsAfterASpikeDrainAtOnceAndThePathRecovers() {
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
            // The one sent at 6.28 s arrives at 6.30 s by itself; the 14 before it waited.
            #expect(pipeline.delay!.report.heldBehind == 14)
            // From the packet sent at 6.28 s on, the path has its own delay again.
            #expect(arrivals.filter { $0.sent >= 6_280_000_000 }.allSatisfy { $0.delay == 20_000_000 })
        }

        @Test func jitterAndSpikesTogetherKeepBothPromises() {
            // 40 ± 10 ms in order with 300 ms spikes of 1 s every 5 s: inside a spike the delay is
            // the path's plus 300 ms; outside, once the queue behind the spike has drained, the
            // path's own mean and spread; only packets sent in the 300 ms after a spike wait.
            var pipeline = ImpairmentPipeline(
                impairment {
                    $0.delay = .milliseconds(40)
                    $0.jitter = .milliseconds(10)
                    $0.spike = DelaySpike(extraDelay: .milliseconds(300), every: .seconds(5))
                }, seed: 77)
            let arrivals = run(&pipeline, count: 50_000)
            func phase(_ arrival: Arrival) -> Double { Double(arrival.sent).truncatingRemainder(dividingBy: 5e9) / 1e6 }
            let inSpike = arrivals.filter { $0.sent >= 5_000_000_000 && phase($0) < 1000 }.map { milliseconds($0.delay) }
            let clear = arrivals.filter { $0.sent < 5_000_000_000 || phase($0) >= 1400 }.map { milliseconds($0.delay) }
            let (spikeMean, spikeDeviation) = meanAndDeviation(inSpike)
            let (clearMean, clearDeviation) = meanAndDeviation(clear)
            print("40 ± 10 ms with spikes: in spikes \(spikeMean) ± \(spikeDeviation) ms, clear \(clearMean) ± \(clearDeviation) ms, "
                + "\(pipeline.delay!.report.heldBehind) packets held behind a spike")
            #expect(abs(spikeMean - 340) < 3 && abs(spikeDeviation - 10) < 1.5)
            #expect(abs(clearMean - 40) < 2 && abs(clearDeviation - 10) < 1)
            #expect(arrivals.map(\.packet) == Array(0..<50_000))
            // At most the 300 ms after each of the 199 spikes, 15 packets each, and more than half.
            #expect(pipeline.delay!.report.heldBehind <= 199 * 17)
            #expect(pipeline.delay!.report.heldBehind > 199 * 8)
        }
    }
}
