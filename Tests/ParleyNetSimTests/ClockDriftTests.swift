import Testing
import ParleyNetSim

extension NetSimTests {
    @Suite("Clock drift")
    struct ClockDriftTests {
        @Test func aFastReceiverClockStretchesTheIntervalsItSees() {
            // +300 ppm: 20 ms frames arrive 20.006 ms apart; after 60 s they are 18 ms late.
            var fast = ImpairmentPipeline(impairment { $0.drift = 300 }, seed: 1)
            var slow = ImpairmentPipeline(impairment { $0.drift = -300 }, seed: 1)
            let fastArrivals = run(&fast, count: 3001)
            let slowArrivals = run(&slow, count: 3001)
            let fastInterval = Double(fastArrivals.last!.arrived - fastArrivals.first!.arrived) / 3000
            let slowInterval = Double(slowArrivals.last!.arrived - slowArrivals.first!.arrived) / 3000
            print("drift ±300 ppm: intervals \(fastInterval) ns and \(slowInterval) ns; offsets after 60 s \(milliseconds(fastArrivals.last!.delay)) and \(milliseconds(slowArrivals.last!.delay)) ms")
            #expect(abs(fastInterval - 20_006_000) < 1)
            #expect(abs(slowInterval - 19_994_000) < 1)
            #expect(abs(milliseconds(fastArrivals.last!.delay) - 18) < 0.001)
            #expect(abs(milliseconds(slowArrivals.last!.delay) + 18) < 0.001)
        }

        @Test func driftScalesAboutTheFlowsFirstPacket() {
            let drift = ClockDrift(partsPerMillion: 1000)
            #expect(drift.receiverTime(5_000_000_000, epoch: 5_000_000_000) == 5_000_000_000)
            #expect(drift.receiverTime(6_000_000_000, epoch: 5_000_000_000) == 6_001_000_000)
        }

        @Test func driftKeepsTheOrderOfArrivals() {
            var pipeline = ImpairmentPipeline(
                impairment {
                    $0.delay = .milliseconds(40)
                    $0.jitter = .milliseconds(10)
                    $0.drift = -300
                }, seed: 3)
            let arrivals = run(&pipeline, count: 10_000)
            #expect(arrivals.map(\.packet) == Array(0..<10_000))
        }
    }
}
