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
                == "loss 4% in bursts of 6, delay 60 ms ± 15 ms normal, spikes +400 ms for 1 s every 15 s, rate 256 kbit/s (queue 500 ms)")
            #expect(Impairment.none.summary == "no impairment")
        }
    }
}
