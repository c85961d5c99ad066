import Foundation
import Testing
import ParleyNetSim

extension NetSimTests {
    /// The command line's values: how they are written, how they combine, and what a person is
    /// told when one is wrong.
    @Suite("Impairment flags")
    struct ImpairmentOptionsTests {
        typealias Syntax = ImpairmentValueSyntax

        @Test func percentagesAndFractions() throws {
            #expect(try Syntax.fraction("5%") == 0.05)
            #expect(try Syntax.fraction("0.5%") == 0.005)
            #expect(try Syntax.fraction("0.05") == 0.05)
            #expect(try Syntax.fraction("1") == 1)
            #expect(try Syntax.fraction("150%") == 1.5)  // syntax is fine; the range check says no
            #expect(throws: ImpairmentSyntaxError("a plain number is a fraction from 0 to 1; for 5 percent write 5%")) {
                try Syntax.fraction("5")
            }
            #expect(throws: ImpairmentSyntaxError.self) { try Syntax.fraction("five") }
            #expect(throws: ImpairmentSyntaxError.self) { try Syntax.fraction("nan%") }
        }

        @Test func durations() throws {
            #expect(try Syntax.duration("40ms") == .milliseconds(40))
            #expect(try Syntax.duration("1.5s") == .milliseconds(1500))
            #expect(try Syntax.duration("250us") == .microseconds(250))
            #expect(try Syntax.duration("250µs") == .microseconds(250))
            #expect(try Syntax.duration("0") == .zero)
            #expect(try Syntax.duration("-3ms") == .milliseconds(-3))  // the range check says no
            #expect(throws: ImpairmentSyntaxError("'40' needs a unit; write it like 40ms or 40s")) { try Syntax.duration("40") }
            #expect(throws: ImpairmentSyntaxError.self) { try Syntax.duration("ms") }
            #expect(throws: ImpairmentSyntaxError.self) { try Syntax.duration("1e300s") }
        }

        @Test func bitRates() throws {
            #expect(try Syntax.bitRate("64kbit") == 64_000)
            #expect(try Syntax.bitRate("1mbit") == 1_000_000)
            #expect(try Syntax.bitRate("1.5Mbit/s") == 1_500_000)
            #expect(try Syntax.bitRate("500000bit") == 500_000)
            #expect(throws: ImpairmentSyntaxError.self) { try Syntax.bitRate("64kbps") }
            #expect(throws: ImpairmentSyntaxError.self) { try Syntax.bitRate("fast") }
            #expect(throws: ImpairmentSyntaxError.self) { try Syntax.bitRate("0kbit") }
            #expect(throws: ImpairmentSyntaxError.self) { try Syntax.bitRate("64") }
        }

        @Test func spikesAndDrift() throws {
            #expect(try Syntax.spike("300ms/10s") == DelaySpike(extraDelay: .milliseconds(300), every: .seconds(10)))
            #expect(throws: ImpairmentSyntaxError.self) { try Syntax.spike("300ms") }
            #expect(try Syntax.partsPerMillion("300ppm") == 300)
            #expect(try Syntax.partsPerMillion("-300ppm") == -300)
            #expect(try Syntax.partsPerMillion("+50") == 50)
            #expect(throws: ImpairmentSyntaxError.self) { try Syntax.partsPerMillion("fast") }
        }

        static func flags(_ pairs: [(ImpairmentSetting, String)]) -> ImpairmentOptions {
            var options = ImpairmentOptions()
            for (setting, text) in pairs { options.set(setting, text) }
            return options
        }

        static func resolve(
            scenario: String? = nil, _ both: [(ImpairmentSetting, String)] = [], up: String? = nil, down: String? = nil
        ) throws(ImpairmentOptionError) -> (up: Impairment, down: Impairment) {
            try ImpairmentOptions.resolve(
                scenario: scenario, both: flags(both),
                up: try up.map { list throws(ImpairmentOptionError) in try ImpairmentOptions(list: list, flag: "--up") } ?? ImpairmentOptions(),
                down: try down.map { list throws(ImpairmentOptionError) in try ImpairmentOptions(list: list, flag: "--down") } ?? ImpairmentOptions())
        }

        /// The message a person sees for a bad command line (without the "Error: " the command adds).
        static func message(
            scenario: String? = nil, _ both: [(ImpairmentSetting, String)] = [], up: String? = nil
        ) -> String? {
            do {
                _ = try resolve(scenario: scenario, both, up: up)
                return nil
            } catch {
                print(error.description)
                return error.description
            }
        }

        @Test func plainFlagsApplyToBothDirectionsAndListsToOne() throws {
            let (up, down) = try Self.resolve([(.loss, "5%"), (.delay, "40ms")], up: "loss=20%,burst=3", down: "delay=80ms,reorder")
            #expect(up.loss == 0.2 && up.lossBurst == 3 && up.delay == .milliseconds(40) && !up.reorder)
            #expect(down.loss == 0.05 && down.lossBurst == nil && down.delay == .milliseconds(80) && down.reorder)
        }

        @Test func flagsOverrideAScenarioSettingBySetting() throws {
            let (up, down) = try Self.resolve(scenario: "bursty-10", [(.loss, "20%")], down: "burst=1.5")
            #expect(up.loss == 0.2 && up.lossBurst == 3)
            #expect(down.loss == 0.2 && down.lossBurst == 1.5)
            let jitter = try Self.resolve(scenario: "jitter-40", [(.reorder, "no")])
            #expect(!jitter.up.reorder && jitter.up.jitter == .milliseconds(40))
            let spike = try Self.resolve(scenario: "spike-300", [(.spikeLength, "2s")])
            #expect(spike.up.spike?.length == .seconds(2) && spike.up.spike?.extraDelay == .milliseconds(300))
        }

        @Test func badValuesAreExplainedInOneSentenceNamingTheFlag() {
            #expect(Self.message([(.loss, "150%")]) == "--loss 150%: a loss rate must be between 0% and 100%.")
            #expect(Self.message([(.delay, "-3ms")]) == "--delay -3ms: a delay cannot be negative; give a duration like 40ms or 1s.")
            #expect(Self.message(scenario: "wifi-bda")
                == "--scenario wifi-bda: there is no scenario called 'wifi-bda'; the scenarios are "
                + Scenario.names.joined(separator: ", ") + ".")
            #expect(Self.message([(.loss, "5")]) == "--loss 5: a plain number is a fraction from 0 to 1; for 5 percent write 5%.")
            #expect(Self.message([(.rate, "64kbps")])
                == "--rate 64kbps: '64kbps' is ambiguous (bits or bytes?); write bits per second like 64kbit or 1mbit.")
            #expect(Self.message([(.jitter, "20")]) == "--jitter 20: '20' needs a unit; write it like 20ms or 20s.")
            #expect(Self.message([(.drift, "20000ppm")]) == "--drift 20000ppm: a clock drift must be between -10000ppm and 10000ppm (±1%).")
            #expect(Self.message(up: "loss=150%") == "--up loss=150%: a loss rate must be between 0% and 100%.")
            #expect(Self.message([(.spikeLength, "2s")]) == "--spike-length 2s: there is no spike to lengthen; add one, like --spike 300ms/10s.")
            #expect(Self.message([(.spike, "300ms/1s"), (.spikeLength, "2s")])
                == "--spike-length 2s: a spike must last longer than zero and no longer than its period (1 s).")
            #expect(Self.message([(.delay, "2weeks")]) == "--delay 2weeks: '2weeks' is not a duration; write it like 40ms, 1.5s or 250us.")
            #expect(Self.message([(.delay, "2min")]) == "--delay 2min: a delay can be at most 60s.")
            #expect(Self.message([(.delay, "61s")]) == "--delay 61s: a delay can be at most 60s.")
            #expect(Self.message([(.jitterDistribution, "cauchy")])
                == "--jitter-distribution cauchy: 'cauchy' is not a jitter distribution; choose normal or pareto.")
        }

        @Test func anImpossibleCombinationNamesTheFlagThatMadeIt() {
            #expect(Self.message([(.loss, "90%"), (.lossBurst, "3")])
                == "--loss 90%: 90% loss is impossible in bursts averaging 3 packets (between bursts at least one packet arrives, "
                + "so the most is 75%); lower the loss or lengthen the bursts.")
            // The scenario set the loss; the flag set the burst, so the message names the flag.
            #expect(Self.message(scenario: "loss-20", [(.lossBurst, "0.1")])
                == "--burst 0.1: a mean burst length is a number of packets, at least 1.")
            #expect(Self.message(scenario: "loss-20", [(.lossBurst, "0.2")])?.hasPrefix("--burst 0.2:") == true)
        }

        @Test func aJitterTheDelayCannotHoldIsRefusedWithWhatWouldDo() {
            // 15 ms ± 20 ms normal would need negative delays a quarter of the time: the path
            // could not deliver the mean and spread the flags promise.
            #expect(Self.message([(.delay, "15ms"), (.jitter, "20ms")])
                == "--jitter 20ms: a normal jitter of 20 ms needs a mean delay of at least 40 ms (twice the jitter), or delays "
                + "would fall below zero and lose the mean and spread asked for; raise the delay, lower the jitter, or use "
                + "--jitter-distribution pareto, which needs 10 ms (half the jitter).")
            #expect(Self.message([(.jitter, "10ms"), (.jitterDistribution, "pareto")])
                == "--jitter 10ms: a pareto jitter of 10 ms needs a mean delay of at least 5 ms (half the jitter), or delays "
                + "would fall below zero and lose the mean and spread asked for; raise the delay or lower the jitter.")
            // The scenario set the jitter; the flag that lowered the delay is the one named.
            #expect(Self.message(scenario: "jitter-40", [(.delay, "50ms")])?.hasPrefix("--delay 50ms: a normal jitter of 40 ms") == true)
            #expect(Self.message([(.delay, "15ms"), (.jitter, "20ms"), (.jitterDistribution, "pareto")]) == nil)
        }

        @Test func badListsAreExplained() {
            #expect(throws: ImpairmentOptionError.self) { try ImpairmentOptions(list: "lose=5%", flag: "--up") }
            do {
                _ = try ImpairmentOptions(list: "delay", flag: "--down")
                Issue.record("a setting without a value was accepted")
            } catch {
                #expect(error.description == "--down delay: 'delay' needs a value, like delay=40ms.")
            }
        }

        @Test func traceFilesAreReadAndTheirErrorsNameTheLine() throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("netsim-trace-\(getpid())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let good = directory.appendingPathComponent("good.txt").path
            let bad = directory.appendingPathComponent("bad.txt").path
            try "20\nloss\n25\n".write(toFile: good, atomically: true, encoding: .utf8)
            try "20\n\n2O\n".write(toFile: bad, atomically: true, encoding: .utf8)
            let (up, down) = try Self.resolve([(.trace, good)])
            #expect(up.trace?.entries.count == 3 && down.trace == up.trace)
            #expect(Self.message([(.trace, bad)])
                == "--trace \(bad): line 3: '2O' is neither a delay in milliseconds (like 42.5) nor the word 'loss'.")
            let missing = directory.appendingPathComponent("missing.txt").path
            #expect(Self.message([(.trace, missing)])
                == "--trace \(missing): cannot open '\(missing)' (No such file or directory); give the path of a trace file.")
        }
    }
}
