import ArgumentParser
import Foundation
import Logging
import ParleyClient
import ParleyNetSim

/// `parley netsim`: a UDP proxy that impairs the packets between clients and a relay.
///
/// The command only reads flags and talks to the person running it; the models, the flag
/// syntax and the proxy live in ParleyNetSim. Every mistake on the command line ends in one
/// sentence on standard error and exit code 2 (ArgumentParser's own would be 64).
struct NetsimCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "netsim",
        abstract: "Relay UDP between clients and a relay through a simulated bad network.",
        usage: "parley netsim --listen HOST:PORT --to HOST:PORT [--scenario NAME] [impairments] [--up LIST] [--down LIST]",
        discussion: """
            Each client address is a flow with its own socket towards the relay and its own \
            seeded impairment of each direction ("up" is client to relay, "down" relay to \
            client). Plain impairment flags apply to both directions, on top of a scenario; \
            --up and --down take the same settings for one direction, as a list: \
            --up loss=20%,burst=3 --down delay=80ms,reorder.

            Values: percentages 5% or 0.05; durations 40ms, 1.5s, 250us; rates 64kbit, 1mbit; \
            spikes EXTRA/PERIOD such as 300ms/10s; drift 300ppm or -300ppm.

            --delay and --jitter are the mean and standard deviation of the delay the packets \
            get, with or without --reorder. Without it the delay varies smoothly in time and \
            never falls faster than time passes, so the path keeps its packets in order the way \
            a real link does; with it each packet draws its own delay and may overtake. The \
            final report gives each direction's delay as mean ± deviation and percentiles.

            A status line on standard error shows what the proxy does (--quiet hides it); \
            Ctrl-C or SIGTERM stops it and prints the final report on standard output.

            Examples:
              parley netsim --listen 127.0.0.1:7000 --to 127.0.0.1:9000 --scenario wifi-bad
              parley netsim --listen 0.0.0.0:7000 --to relay.example.org:9000 \\
                  --loss 10% --burst 3 --delay 40ms --jitter 15ms --seed 42
              parley netsim --listen 127.0.0.1:7000 --to 127.0.0.1:9000 \\
                  --up rate=64kbit,queue=300ms --down drift=-300ppm

            Scenarios (parley netsim --list-scenarios shows their parameters):
            \(indentedList(Scenario.all.map(\.name)))
            """ + "\n\n" + NetsimExitStatus.helpText)

    @Option(help: ArgumentHelp("Where clients send: HOST:PORT (port 0 lets the system choose).", valueName: "host:port"))
    var listen: String?

    @Option(name: .customLong("to"), help: ArgumentHelp("Where the relay is: HOST:PORT.", valueName: "host:port"))
    var relay: String?

    @Option(help: ArgumentHelp("A named network to start from (see --list-scenarios).", valueName: "name"))
    var scenario: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Packets lost: 5% or 0.05.", valueName: "rate"))
    var loss: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Lose packets in bursts of this mean length (Gilbert–Elliott).", valueName: "packets"))
    var burst: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Mean of the one-way delay the path adds: 40ms.", valueName: "duration"))
    var delay: String?

    @Option(parsing: .unconditional, help: ArgumentHelp(
            "Standard deviation of that delay, as the receiver measures it: 15ms (spikes add to it).", valueName: "duration"))
    var jitter: String?

    @Option(parsing: .unconditional, help: ArgumentHelp(
            "normal (needs --delay ≥ 2 × jitter), or pareto: a queue behind heavy-tailed bursts (≥ 0.5 ×).", valueName: "shape"))
    var jitterDistribution: String?

    @Flag(inversion: .prefixedNo, help: "Let packets overtake each other (without: the path keeps them in order).")
    var reorder: Bool?

    @Option(parsing: .unconditional, help: ArgumentHelp("Packets sent twice: 1%.", valueName: "rate"))
    var duplicate: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Extra delay and how often: 300ms/10s.", valueName: "extra/period"))
    var spike: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("How long each spike lasts (default 1s).", valueName: "duration"))
    var spikeLength: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Bottleneck rate, headers included: 64kbit, 1mbit.", valueName: "rate"))
    var rate: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("The bottleneck queue, as the longest wait in it (default 200ms).", valueName: "duration"))
    var queue: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Receiver clock drift: 300ppm (fast) or -300ppm (slow).", valueName: "ppm"))
    var drift: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Replay a recorded path: one line per packet, a delay in ms or 'loss'.", valueName: "file"))
    var trace: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Settings for client → relay only: loss=20%,delay=80ms,reorder.", valueName: "list"))
    var up: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Settings for relay → client only, as for --up.", valueName: "list"))
    var down: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Seed of every random choice; the same seed repeats a run (default: random, printed).", valueName: "n"))
    var seed: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Close a flow after this long without packets (default 120s).", valueName: "duration"))
    var idleTimeout: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Refuse clients beyond this many flows (default 1024).", valueName: "n"))
    var maxFlows: String?

    @Flag(help: "No status line; warnings and the final report only.")
    var quiet = false

    @Flag(help: "List the scenarios and their parameters, then exit.")
    var listScenarios = false

    /// Caught here rather than by ArgumentParser, so a misspelt flag also exits with code 2.
    @Argument(parsing: .allUnrecognized, help: .hidden)
    var unrecognized: [String] = []

    func run() throws {
        if listScenarios {
            print(Self.scenarioTable)
            return
        }
        let settings: Settings
        do {
            settings = try makeSettings()
        } catch {
            Self.fail(usage: error.description)
        }

        let console = ProxyConsole()
        let logger = Logger(label: "parley.netsim") { _ in
            ProxyConsoleLogHandler(console: console, level: quiet ? .warning : .info)
        }
        let runner: ProxyRunner
        do {
            runner = try ProxyRunner.start(
                listen: settings.listen, relay: settings.relay, up: settings.up, down: settings.down,
                seed: settings.seed, idleTimeout: settings.idleTimeout, maximumFlows: settings.maximumFlows, logger: logger)
        } catch let error as ImpairmentOptionError {
            Self.fail(usage: error.description)
        } catch {
            console.printLine("Error: \(error).")
            throw ExitCode(NetsimExitStatus.cannotRun.rawValue)
        }

        console.printLine(
            "parley netsim: clients → \(runner.listeningAddress) → relay \(settings.relay), seed \(settings.seed) "
                + "(--seed \(settings.seed) repeats this run)")
        console.printLine("  up   (client → relay): \(settings.up.summary)")
        console.printLine("  down (relay → client): \(settings.down.summary)")

        let stopped = DispatchSemaphore(value: 0)
        let signals = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { stopped.signal() }
            source.resume()
            return source
        }
        let failed = ProxyFailure()
        Thread.detachNewThread {
            if runner.waitUntilClosed() {
                failed.happened = true
                stopped.signal()
            }
        }
        var status: (any DispatchSourceTimer)?
        if !quiet {
            // A terminal gets a live line every second; a log file a line every ten.
            let interval: DispatchTimeInterval = console.isTerminal ? .seconds(1) : .seconds(10)
            let timer = DispatchSource.makeTimerSource(queue: .global())
            timer.schedule(deadline: .now() + interval, repeating: interval)
            timer.setEventHandler {
                if let report = runner.report() { console.showStatus(report.statusLine) }
            }
            timer.resume()
            status = timer
        }

        stopped.wait()
        status?.cancel()
        signals.forEach { $0.cancel() }
        let report = runner.stop()
        console.finish()
        print(report.finalReport)
        if failed.happened {
            console.printLine("Error: the proxy's socket failed; see the messages above.")
            throw ExitCode(NetsimExitStatus.cannotRun.rawValue)
        }
    }

    /// Everything the flags say, checked.
    struct Settings {
        var listen: ProxyRunner.Endpoint
        var relay: ProxyRunner.Endpoint
        var up: Impairment
        var down: Impairment
        var seed: UInt64
        var idleTimeout: Duration
        var maximumFlows: Int
    }

    func makeSettings() throws(ImpairmentOptionError) -> Settings {
        if let first = unrecognized.first {
            throw ImpairmentOptionError(Self.unknownArgumentMessage(first))
        }
        var both = ImpairmentOptions()
        both.set(.loss, loss)
        both.set(.lossBurst, burst)
        both.set(.delay, delay)
        both.set(.jitter, jitter)
        both.set(.jitterDistribution, jitterDistribution)
        both.set(.reorder, reorder.map { $0 ? "yes" : "no" })
        both.set(.duplicate, duplicate)
        both.set(.spike, spike)
        both.set(.spikeLength, spikeLength)
        both.set(.rate, rate)
        both.set(.queue, queue)
        both.set(.drift, drift)
        both.set(.trace, trace)
        let (upImpairment, downImpairment) = try ImpairmentOptions.resolve(
            scenario: scenario, both: both,
            up: try up.map { list throws(ImpairmentOptionError) in try ImpairmentOptions(list: list, flag: "--up") } ?? ImpairmentOptions(),
            down: try down.map { list throws(ImpairmentOptionError) in try ImpairmentOptions(list: list, flag: "--down") } ?? ImpairmentOptions())

        guard let listen else {
            throw ImpairmentOptionError("--listen is missing: say where clients send, like --listen 127.0.0.1:7000")
        }
        guard let relay else {
            throw ImpairmentOptionError("--to is missing: say where the relay is, like --to 127.0.0.1:9000")
        }
        var seedValue = UInt64.random(in: 0...999_999)
        if let seed {
            guard let parsed = UInt64(seed) else {
                throw ImpairmentOptionError("--seed \(seed): a seed is a whole number from 0 to \(UInt64.max)")
            }
            seedValue = parsed
        }
        var idle: Duration = .seconds(120)
        if let idleTimeout {
            do throws(ImpairmentSyntaxError) {
                idle = try ImpairmentValueSyntax.duration(idleTimeout)
            } catch {
                throw ImpairmentOptionError("--idle-timeout \(idleTimeout): \(error.reason)")
            }
            guard idle >= .seconds(1), idle <= .seconds(86_400) else {
                throw ImpairmentOptionError("--idle-timeout \(idleTimeout): give between 1s and 86400s (a day)")
            }
        }
        var flows = 1024
        if let maxFlows {
            guard let parsed = Int(maxFlows), (1...65_536).contains(parsed) else {
                throw ImpairmentOptionError("--max-flows \(maxFlows): give a whole number from 1 to 65536")
            }
            flows = parsed
        }
        return Settings(
            listen: try ProxyRunner.Endpoint(parsing: listen, flag: "--listen", allowsAnyPort: true),
            relay: try ProxyRunner.Endpoint(parsing: relay, flag: "--to"),
            up: upImpairment, down: downImpairment, seed: seedValue, idleTimeout: idle, maximumFlows: flows)
    }

    /// Prints a usage mistake the way every `parley netsim` mistake is printed, and exits 2.
    static func fail(usage message: String) -> Never {
        FileHandle.standardError.write(Data("Error: \(message)\nUsage: \(configuration.usage!)\n  See 'parley netsim --help'.\n".utf8))
        Self.exit(withError: ExitCode(NetsimExitStatus.badUsage.rawValue))
    }

    static func unknownArgumentMessage(_ argument: String) -> String {
        guard argument.hasPrefix("-") else {
            return "'\(argument)' is not an option of parley netsim; every setting is a flag, like --loss 5%"
        }
        let name = String(argument.drop { $0 == "-" }.prefix { $0 != "=" })
        let known = ["listen", "to", "scenario", "up", "down", "seed", "idle-timeout", "max-flows", "quiet", "list-scenarios", "no-reorder"]
            + ImpairmentSetting.allCases.map(\.rawValue)
        let closest = known.min { editDistance($0, name) < editDistance($1, name) }
        if let closest, editDistance(closest, name) <= 2 {
            return "\(argument) is not an option of parley netsim; did you mean --\(closest)?"
        }
        return "\(argument) is not an option of parley netsim"
    }

    static var scenarioTable: String {
        var lines = ["Scenarios for parley netsim --scenario NAME (flags given with one override its values):", ""]
        for scenario in Scenario.all {
            lines.append("\(scenario.name): \(scenario.about)")
            if scenario.up == scenario.down {
                lines.append("    both ways: \(scenario.up.summary)")
            } else {
                lines.append("    up:   \(scenario.up.summary)")
                lines.append("    down: \(scenario.down.summary)")
            }
        }
        return lines.joined(separator: "\n")
    }
}

/// Set by the thread that sees the proxy stop by itself, read after the semaphore.
private final class ProxyFailure: @unchecked Sendable {
    var happened = false
}

/// Levenshtein distance, for "did you mean".
private func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a), b = Array(b)
    var previous = Array(0...b.count)
    for i in 1...max(a.count, 1) where !a.isEmpty {
        var current = [i] + Array(repeating: 0, count: b.count)
        for j in 1...max(b.count, 1) where !b.isEmpty {
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        previous = current
    }
    return a.isEmpty ? b.count : previous[b.count]
}

/// `items` after two spaces, as many to a line as fit in 80 columns: a help line a terminal
/// never has to wrap.
func indentedList(_ items: [String]) -> String {
    var lines: [String] = []
    var line = ""
    for item in items {
        let next = line.isEmpty ? "  " + item : line + ", " + item
        if next.count > 78, !line.isEmpty {
            lines.append(line + ",")
            line = "  " + item
        } else {
            line = next
        }
    }
    return (lines + [line]).joined(separator: "\n")
}
