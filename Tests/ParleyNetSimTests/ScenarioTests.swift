import Testing
import ParleyNetSim

extension NetSimTests {
    @Suite("Named scenarios")
    struct ScenarioTests {
        @Test func everyScenarioIsValidAndFoundByItsName() throws {
            #expect(Scenario.names == [
                "clean", "wifi-bad", "mobile-bursty", "congested-vps", "loss-5", "bursty-10", "loss-20",
                "jitter-40", "spike-300", "duplicate-5", "drift-300",
            ])
            for scenario in Scenario.all {
                try scenario.up.validate()
                try scenario.down.validate()
                #expect(try Scenario.named(scenario.name) == scenario)
                #expect(!scenario.about.isEmpty)
            }
        }

        @Test func theScenariosTheCallTestsUseHaveTheirStatedParameters() throws {
            #expect(try Scenario.named("loss-5").up == impairment { $0.loss = 0.05 })
            #expect(try Scenario.named("loss-20").down == impairment { $0.loss = 0.20 })
            let bursty = try Scenario.named("bursty-10")
            #expect(bursty.up.loss == 0.10 && bursty.up.lossBurst == 3)
            let jitter = try Scenario.named("jitter-40")
            #expect(jitter.up.jitter == .milliseconds(40) && jitter.up.reorder)
            let spike = try Scenario.named("spike-300").up.spike
            #expect(spike == DelaySpike(extraDelay: .milliseconds(300), every: .seconds(5), lasting: .seconds(1)))
            #expect(try Scenario.named("duplicate-5").up.duplicate == 0.05)
            let drift = try Scenario.named("drift-300")
            #expect(drift.up.drift == 300 && drift.down.drift == -300)
            #expect(try Scenario.named("clean").up.isNone)
        }

        @Test func everyScenarioSaysWhatItFollows() {
            // A measured path names its study or standard and the year; a synthetic one says so.
            for scenario in Scenario.all where scenario.name != "clean" {
                let cites = scenario.about.contains { $0.isNumber }
                    && ["20", "ITU-T", "3GPP"].contains { scenario.about.contains($0) }
                #expect(scenario.about.hasPrefix("Synthetic: ") || cites, "\(scenario.name): \(scenario.about)")
            }
        }

        /// Delays in milliseconds of `count` voice packets (ten minutes) through a scenario's
        /// up direction, sorted, with those sent during a spike or in the second after it set
        /// apart; and the share of packets lost.
        static func delays(_ name: String, count: Int = 30_000) throws -> (all: [Double], clear: [Double], lossRate: Double) {
            let configured = try Scenario.named(name).up
            var pipeline = ImpairmentPipeline(configured, seed: 2027)
            let arrivals = run(&pipeline, count: count)
            let spike = try #require(configured.spike)
            let clear = arrivals.filter { arrival in
                let phase = arrival.sent % spike.period.nanoseconds
                return arrival.sent < spike.period.nanoseconds || phase >= spike.length.nanoseconds + 1_000_000_000
            }
            let lossRate = 1 - Double(Set(arrivals.map(\.packet)).count) / Double(count)
            return (arrivals.map { milliseconds($0.delay) }.sorted(), clear.map { milliseconds($0.delay) }.sorted(), lossRate)
        }

        static func percentile(_ sorted: [Double], _ percent: Double) -> Double {
            sorted[min(sorted.count - 1, Int(Double(sorted.count) * percent / 100))]
        }

        @Test func wifiBadHasTheLatencyTailMeasuredOnRealWiFi() throws {
            // Sui et al. (MobiSys 2016): Wi-Fi latency's 90th percentile about 20 ms, 99th about 250 ms.
            let (all, _, lossRate) = try Self.delays("wifi-bad")
            let (p50, p90, p99) = (Self.percentile(all, 50), Self.percentile(all, 90), Self.percentile(all, 99))
            print("wifi-bad: p50 \(p50) ms, p90 \(p90) ms, p99 \(p99) ms, max \(all.last!) ms, loss \(lossRate)")
            #expect(p50 > 2.5 && p50 < 4)
            #expect(p90 > 15 && p90 < 25)
            #expect(p99 > 200 && p99 < 300)
            #expect(all.last! < 7 + 250 + 80, "nothing waits longer than a stall and the queue's bound")
            #expect(abs(lossRate - 0.04) < 0.006)
        }

        @Test func mobileBurstyStaysInsideVoLTEsDelayBudgetOutsideItsStalls() throws {
            // 3GPP TS 23.203, QCI 1: 100 ms at the 98th percentile, 1% loss (in bursts of 4, so
            // measured over 70 minutes: 500 bursts, whose count alone varies by ±6%).
            let (_, clear, lossRate) = try Self.delays("mobile-bursty", count: 200_000)
            let p98 = Self.percentile(clear, 98)
            print("mobile-bursty outside stalls: p98 \(p98) ms; loss \(lossRate)")
            #expect(p98 > 85 && p98 < 100)
            #expect(relativeError(lossRate, 0.01) < 0.2)
        }

        @Test func congestedVPSHasG1050SeverityDsJitterOutsideItsStalls() throws {
            // ITU-T G.1050 severity D: 32 ms, jitter uniform up to 40 ms (a deviation of 11.5 ms).
            // Its loss comes as link failures of 13 packets: measured over three hours, 270 of them.
            let (_, clear, lossRate) = try Self.delays("congested-vps", count: 540_000)
            let (mean, deviation) = meanAndDeviation(clear)
            print("congested-vps outside stalls: \(mean) ± \(deviation) ms, floor \(clear.first!) ms; loss \(lossRate)")
            #expect(abs(mean - 32) < 1.5 && abs(deviation - 12) < 1.2)
            #expect(clear.first! > 25)
            #expect(relativeError(lossRate, 0.005) < 0.25)
        }

        @Test func anUnknownScenarioNamesTheKnownOnes() {
            #expect(throws: ScenarioError(name: "wifi-bda")) { try Scenario.named("wifi-bda") }
            let message = ScenarioError(name: "wifi-bda").description
            print(message)
            #expect(message.hasPrefix("there is no scenario called 'wifi-bda'; the scenarios are clean, wifi-bad, "))
        }

        @Test func summariesReadAsTheParameters() throws {
            #expect(try Scenario.named("bursty-10").up.summary == "loss 10% in bursts of 3")
            #expect(try Scenario.named("jitter-40").up.summary == "delay 120 ms ± 40 ms normal, reordering")
            #expect(try Scenario.named("spike-300").up.summary == "delay 20 ms, spikes +300 ms for 1 s every 5 s")
            #expect(try Scenario.named("mobile-bursty").up.summary
                == "loss 1% in bursts of 4, delay 60 ms ± 15 ms normal, spikes +300 ms for 1 s every 15 s")
            #expect(Impairment.none.summary == "no impairment")
        }
    }
}
