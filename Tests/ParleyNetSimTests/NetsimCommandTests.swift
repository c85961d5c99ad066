import Foundation
import NIOCore
import NIOPosix
import Testing
import ParleyNetSim

extension NetSimTests {
    /// `parley netsim` as a person runs it: the real binary, built beside this test bundle.
    @Suite("parley netsim on the command line")
    struct NetsimCommandTests {
        /// The `parley` executable that `swift build --build-tests` puts beside the test bundle.
        static var parley: URL {
            URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
                .deletingLastPathComponent().appendingPathComponent("parley")
        }

        struct Finished {
            let status: Int32
            let standardOutput: String
            let standardError: String
        }

        static func run(_ arguments: [String]) throws -> Finished {
            let process = Process()
            process.executableURL = parley
            process.arguments = ["netsim"] + arguments
            let output = Pipe()
            let error = Pipe()
            process.standardOutput = output
            process.standardError = error
            try process.run()
            let outputData = output.fileHandleForReading.readDataToEndOfFile()
            let errorData = error.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return Finished(
                status: process.terminationStatus, standardOutput: String(decoding: outputData, as: UTF8.self),
                standardError: String(decoding: errorData, as: UTF8.self))
        }

        @Test func theParleyBinaryIsBuilt() {
            #expect(FileManager.default.isExecutableFile(atPath: Self.parley.path), "build it first: swift build --build-tests")
        }

        /// Acceptance 4: a bad flag gets one sentence saying what is wrong and what is allowed,
        /// then the usage, and exit code 2.
        @Test(arguments: [
            (["--loss", "150%"], "--loss 150%: a loss rate must be between 0% and 100%."),
            (["--delay", "-3ms"], "--delay -3ms: a delay cannot be negative; give a duration like 40ms or 1s."),
            (["--scenario", "wifi-worse"],
             "--scenario wifi-worse: there is no scenario called 'wifi-worse'; the scenarios are clean, wifi-bad, mobile-bursty, "
                + "congested-vps, loss-5, bursty-10, loss-20, jitter-40, spike-300, duplicate-5, drift-300."),
            (["--rate", "64kbps"], "--rate 64kbps: '64kbps' is ambiguous (bits or bytes?); write bits per second like 64kbit or 1mbit."),
            (["--spike", "300ms"], "--spike 300ms: '300ms' is not a spike; write the extra delay and how often, like 300ms/10s."),
            (["--lose", "5%"], "--lose is not an option of parley netsim; did you mean --loss?"),
            (["--up", "loss=150%"], "--up loss=150%: a loss rate must be between 0% and 100%."),
            (["--seed", "-1"], "--seed -1: a seed is a whole number from 0 to 18446744073709551615."),
        ])
        func aBadFlagIsExplainedInOneSentenceAndExitsWithCodeTwo(flags: [String], message: String) throws {
            let finished = try Self.run(["--listen", "127.0.0.1:0", "--to", "127.0.0.1:9"] + flags)
            let lines = finished.standardError.split(separator: "\n")
            print("parley netsim \(flags.joined(separator: " ")) → exit \(finished.status): \(lines.first ?? "")")
            #expect(finished.status == 2)
            #expect(lines.first.map(String.init) == "Error: " + message)
            #expect(lines.dropFirst().first?.hasPrefix("Usage: parley netsim --listen HOST:PORT --to HOST:PORT") == true)
            #expect(finished.standardOutput.isEmpty)
        }

        @Test(arguments: [
            ([], "--listen is missing: say where clients send, like --listen 127.0.0.1:7000."),
            (["--listen", "127.0.0.1:0"], "--to is missing: say where the relay is, like --to 127.0.0.1:9000."),
            (["--listen", "127.0.0.1", "--to", "127.0.0.1:9"], "--listen 127.0.0.1: give a host and a port, like 127.0.0.1:7000."),
            (["--listen", "127.0.0.1:0", "--to", "127.0.0.1:0"], "--to 127.0.0.1:0: the port must be a number from 1 to 65535."),
            (["--listen", "127.0.0.1:0", "--to", "no-such-host.invalid:9"],
             "--to no-such-host.invalid:9: cannot find the host 'no-such-host.invalid'; check the name or give an IP address."),
        ])
        func aMissingOrBadAddressIsExplainedAndExitsWithCodeTwo(arguments: [String], message: String) throws {
            let finished = try Self.run(arguments)
            #expect(finished.status == 2)
            #expect(finished.standardError.split(separator: "\n").first.map(String.init) == "Error: " + message)
        }

        @Test func aPortInUseIsTheMachinesProblemAndExitsWithCodeOne() throws {
            let taken = try DatagramBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).wait()
            defer { try? taken.close().wait() }
            let finished = try Self.run(["--listen", "127.0.0.1:\(taken.localAddress!.port!)", "--to", "127.0.0.1:9"])
            print(finished.standardError)
            #expect(finished.status == 1)
            #expect(finished.standardError.contains("cannot listen on 127.0.0.1:\(taken.localAddress!.port!): address already in use"))
        }

        @Test func listScenariosShowsEveryScenarioWithItsParameters() throws {
            let finished = try Self.run(["--list-scenarios"])
            #expect(finished.status == 0)
            for scenario in Scenario.all {
                #expect(finished.standardOutput.contains("\(scenario.name): \(scenario.about)"))
            }
            #expect(finished.standardOutput.contains("    both ways: loss 10% in bursts of 3"))
            #expect(finished.standardOutput.contains("    down: delay 40 ms, drift -300 ppm"))
        }

        /// The whole program: start it, send through it both ways, interrupt it, read its report.
        @Test func theProxyRunsAsAProgramAndReportsWhenInterrupted() async throws {
            let relay = try await ProbeSocket.bind()
            let client = try await ProbeSocket.bind()
            let process = Process()
            process.executableURL = Self.parley
            process.arguments = [
                "netsim", "--listen", "127.0.0.1:0", "--to", "127.0.0.1:\(relay.address.port!)",
                "--delay", "20ms", "--up", "loss=10%,rate=1mbit", "--seed", "7", "--quiet",
            ]
            let output = Pipe()
            let error = Pipe()
            process.standardOutput = output
            process.standardError = error
            try process.run()

            // Three lines: where clients send ("parley netsim: clients → 127.0.0.1:PORT → relay …"),
            // then what each direction does.
            var banner = ""
            while banner.filter({ $0 == "\n" }).count < 3 {
                let chunk = error.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                banner += String(decoding: chunk, as: UTF8.self)
            }
            print(banner)
            let port = try #require(banner.firstMatch(of: /clients → 127\.0\.0\.1:(\d+) →/).flatMap { Int($0.1) })
            #expect(banner.contains("up   (client → relay): loss 10%, delay 20 ms, rate 1 Mbit/s (queue 200 ms)"))
            #expect(banner.contains("down (relay → client): delay 20 ms"))

            let proxy = try SocketAddress(ipAddress: "127.0.0.1", port: port)
            try await client.sendStreams([(1, .address(proxy))], count: 100, rate: 500)
            try await relay.sendStreams([(1, .sourceOf(ssrc: 1))], count: 20, rate: 500)
            try await Task.sleep(for: .milliseconds(300))
            let up = try await relay.arrivals()
            let down = try await client.arrivals()
            let upDelays = up.map(\.delayMilliseconds)
            print("through the program: \(up.count) of 100 up (10% loss set), \(down.count) of 20 down; up delay \(meanAndDeviation(upDelays))")
            #expect(up.count >= 80 && up.count <= 97)
            #expect(down.count == 20)
            #expect(upDelays.allSatisfy { $0 >= 20 })

            process.interrupt()
            let report = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            print(report)
            #expect(process.terminationStatus == 0)
            #expect(report.contains("up   (client → relay): 100 packets, lost \(100 - up.count) "))
            #expect(report.contains("down (relay → client): 20 packets, lost 0 (0.0%)"))
            try await relay.close()
            try await client.close()
        }
    }
}
