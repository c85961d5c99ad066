import Foundation
import Testing
import ParleyNetSim

extension NetSimTests {
    @Suite("Impairment pipeline")
    struct ImpairmentPipelineTests {
        @Test func theSameSeedGivesTheSameDeliveriesAndAnotherSeedOthers() throws {
            let wifi = try Scenario.named("wifi-bad").up
            func deliveries(seed: UInt64) -> [Deliveries] {
                var pipeline = ImpairmentPipeline(wifi, seed: seed)
                return (0..<20_000).map { pipeline.process(sentAt: .milliseconds(20 * $0), size: 100) }
            }
            #expect(deliveries(seed: 77) == deliveries(seed: 77))
            #expect(deliveries(seed: 77) != deliveries(seed: 78))
        }

        @Test func turningOnJitterDoesNotChangeWhichPacketsAreLost() {
            func lostPackets(_ configure: (inout Impairment) -> Void) -> [Int] {
                var pipeline = ImpairmentPipeline(impairment(configure), seed: 5)
                return (0..<10_000).filter { pipeline.process(sentAt: .milliseconds(20 * $0), size: 100).isLost }
            }
            let lossOnly = lostPackets { $0.loss = 0.1 }
            let withEverything = lostPackets {
                $0.loss = 0.1
                $0.delay = .milliseconds(30)
                $0.jitter = .milliseconds(10)
                $0.duplicate = 0.05
            }
            #expect(lossOnly.count > 900)
            #expect(lossOnly == withEverything)
        }

        @Test func duplicationHitsTheSetRateAndEveryCopyArrives() {
            var pipeline = ImpairmentPipeline(
                impairment {
                    $0.duplicate = 0.05
                    $0.delay = .milliseconds(20)
                    $0.jitter = .milliseconds(5)
                }, seed: 0xD0B)
            let arrivals = run(&pipeline, count: 100_000)
            let copies = Dictionary(grouping: arrivals, by: \.packet).mapValues(\.count)
            let duplicated = copies.values.filter { $0 == 2 }.count
            let rate = Double(duplicated) / 100_000
            print("duplication 5%: measured \(rate) (limit ±10%)")
            #expect(copies.count == 100_000)
            #expect(relativeError(rate, 0.05) <= 0.10)
            #expect(pipeline.report.duplicated == duplicated)
            #expect(pipeline.report.delivered == arrivals.count)
            #expect(pipeline.duplication!.report.duplicated == duplicated)
        }

        @Test func theReportAccountsForEveryPacket() throws {
            var mobile = try Scenario.named("mobile-bursty").up
            mobile.rate = 256_000
            mobile.queue = .milliseconds(500)
            var pipeline = ImpairmentPipeline(mobile, seed: 1)
            let arrivals = run(&pipeline, count: 50_000, interval: .milliseconds(5), size: 200)
            let report = pipeline.report
            print("mobile-bursty up through 256 kbit/s at 200 packets/s: \(report.summary)")
            #expect(report.packets == 50_000)
            #expect(report.delivered == arrivals.count)
            #expect(report.delivered == report.packets - report.lost + report.duplicated - report.queueDropped)
            // 200 × 228-byte packets a second is 365 kbit/s into 256 kbit/s: the queue must drop.
            #expect(report.queueDropped > 5_000)
            // The report's percentiles agree with the arrivals to within the histogram's 1%.
            let sorted = arrivals.map(\.delay).sorted()
            for percent in [50.0, 95, 99] {
                let measured = milliseconds(sorted[Int(Double(sorted.count) * percent / 100) - 1])
                let reported = report.delay.percentile(percent).inMilliseconds
                #expect(relativeError(reported, measured) < 0.01, "p\(percent): measured \(measured) ms, reported \(reported) ms")
            }
        }

        @Test func noImpairmentDeliversEveryPacketWhenItIsSent() {
            var pipeline = ImpairmentPipeline(.none, seed: 1)
            for packet in 0..<1000 {
                let deliveries = pipeline.process(sentAt: .microseconds(137 * packet), size: 1200)
                #expect(Array(deliveries) == [.microseconds(137 * packet)])
            }
            #expect(pipeline.report.delay.maximum == .zero)
        }

        @Test func everyScenarioDoesWhatItSays() throws {
            // Ten minutes of voice (20 ms packets) each way through every scenario.
            for scenario in Scenario.all {
                for (direction, configured) in [("up", scenario.up), ("down", scenario.down)] {
                    var pipeline = ImpairmentPipeline(configured, seed: 2026)
                    let arrivals = run(&pipeline, count: 30_000, size: 120)
                    let received = Set(arrivals.map(\.packet)).count
                    let loss = 1 - Double(received) / 30_000
                    let report = pipeline.report
                    print("\(scenario.name) \(direction): loss \(String(format: "%.2f", loss * 100))%, \(report.summary)")
                    // Every loss comes from the loss model here: voice fits every rate limit.
                    #expect(report.queueDropped == 0, "\(scenario.name) \(direction)")
                    // Ten minutes hold a thousand independent losses but only a dozen of
                    // congested-vps's 13-packet link failures: a rate measured over fewer than 100
                    // bursts is left to the scenario's own, longer test.
                    let bursts = 30_000 * configured.loss / (configured.lossBurst ?? 1)
                    if configured.loss > 0 && bursts >= 100 {
                        #expect(relativeError(loss, configured.loss) <= 0.15, "\(scenario.name) \(direction): loss \(loss)")
                    } else if configured.loss > 0 {
                        #expect(loss > 0, "\(scenario.name) \(direction)")
                    } else {
                        #expect(loss == 0, "\(scenario.name) \(direction)")
                    }
                    #expect((report.reordered > 0) == configured.reorder, "\(scenario.name) \(direction)")
                    #expect((report.duplicated > 0) == (configured.duplicate > 0), "\(scenario.name) \(direction)")
                    // Drift moves arrivals by ppm × elapsed time: on average by ppm × 300 s here.
                    let meanDelay = report.delay.mean.inMilliseconds
                    let driftOffset = configured.drift * 1e-6 * 300_000
                    #expect(meanDelay >= configured.delay.inMilliseconds * 0.95 + driftOffset, "\(scenario.name) \(direction)")
                }
            }
        }
    }
}
