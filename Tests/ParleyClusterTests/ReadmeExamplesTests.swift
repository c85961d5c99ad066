import Foundation
import Logging
import ParleyAdmin
import ParleyAudio
import ParleyBasics
import ParleyRelay
import ParleySecurity
import Testing

/// The README's examples, taken from README.md itself and run as a person would paste them
/// (with bash, `parley` and `parley-relay` on the PATH), against relays this test starts:
/// only paths and addresses are substituted (`/etc/parley` for a folder of the test's,
/// `relay.example.org:7800` and the fixed ports for free ones), so the docs cannot drift
/// from the code. `parley ctl` and `parley-relay admin` act on real calls; the three-relay
/// recipe and its regions make invites a real `parley call` joins with.
@Suite("The README's examples, run as written", .serialized)
struct ReadmeExamplesTests {
    static let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("README.md")
    static var binaries: String { RelayCluster.relayBinary.deletingLastPathComponent().path }

    struct Failure: Error, CustomStringConvertible { let description: String }

    /// The README's ```sh blocks, each as its commands: a line ending in `\` is joined with the next.
    static func blocks() throws -> [[String]] {
        let text = try String(contentsOf: readme, encoding: .utf8)
        var blocks: [[String]] = []
        var current: [String]?
        var pending = ""
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if current == nil {
                if line == "```sh" { current = [] }
                continue
            }
            if line == "```" {
                blocks.append(current ?? [])
                current = nil
                continue
            }
            if line.hasSuffix("\\") {
                pending += line.dropLast() + " "
                continue
            }
            let command = pending + line
            pending = ""
            if !command.trimmingCharacters(in: .whitespaces).isEmpty { current?.append(command) }
        }
        return blocks
    }

    /// The one block with a line starting with `start`.
    static func block(startingWith start: String) throws -> [String] {
        let found = try blocks().filter { $0.contains { $0.hasPrefix(start) } }
        guard found.count == 1 else { throw Failure(description: "the README has \(found.count) blocks with a line starting '\(start)'") }
        return found[0]
    }

    static func substituted(_ line: String, _ substitutions: [(String, String)]) -> String {
        substitutions.reduce(line) { $0.replacingOccurrences(of: $1.0, with: $1.1) }
    }

    /// Runs `script` with bash (pipefail) in `directory`; its output goes to a file, so a
    /// relay it leaves running in the background holds no pipe open. Spawned and reaped here
    /// (posix_spawn, waitpid) rather than by Foundation's Process, whose wait does not end
    /// while a background job of the script lives on.
    static func shell(_ script: String, in directory: String, environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
        let log = directory + "/shell-\(UUID().uuidString).log"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let variables = ["PATH": binaries + ":/usr/bin:/bin", "HOME": directory].merging(environment) { $1 }.map { "\($0.key)=\($0.value)" }
        let arguments: [String] = ["/bin/bash", "-o", "pipefail", "-c", "cd '\(directory)' || exit 99\n" + script]
        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = variables.map { strdup($0) } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/bin/bash", &actions, nil, argv, envp)
        guard spawned == 0 else { throw Failure(description: "cannot run bash: \(spawned)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let code = status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
        return (code, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
    }

    /// Runs each command of `block` on its own and expects it to succeed; `jq` filters must
    /// find what they ask for (a `null` means the README names a field that is not there).
    static func runEach(_ block: [String], _ substitutions: [(String, String)], in directory: String, environment: [String: String]) throws {
        for line in block {
            let command = substituted(line, substitutions)
            let (status, output) = try shell(command, in: directory, environment: environment)
            print("$ \(line)\n\(output.prefix(600))")
            #expect(status == 0, "the README's `\(line)` exited \(status): \(output.prefix(600))")
            if line.contains("| jq") { #expect(!output.contains("null"), "the README's `\(line)` finds nothing: \(output.prefix(600))") }
        }
    }

    static func folder() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-readme-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    static func tone(in directory: String, seconds: Int) throws -> String {
        let path = directory + "/tone.wav"
        let writer = try WAVFileWriter(path: path)
        try writer.append((0..<(seconds * 48_000)).map { 0.3 * Float(sin(Double($0) * 2 * Double.pi * 440 / 48_000)) })
        try writer.close()
        return path
    }

    /// A relay in this process with the secret file `directory/relay.secret`, its admin port on.
    static func relay(in directory: String) throws -> (relay: Relay, secret: SecretFile, admin: AdminServer) {
        let secret = SecretFile.random()
        try secret.write(path: directory + "/relay.secret", overwrite: true)
        var configuration = RelayConfiguration()
        configuration.listen = HostAndPort(host: "127.0.0.1", port: 0)
        configuration.threads = 1
        configuration.shutdownGraceMilliseconds = 300
        var logger = Logger(label: "readme-relay")
        logger.logLevel = .error
        let relay = try Relay.start(configuration: configuration, secret: secret.tokenSecret, relayKey: secret.relayKey, logger: logger)
        let admin = try AdminServer.start(serving: relay, at: HostAndPort(host: "127.0.0.1", port: 0), token: secret.adminToken, logger: logger)
        return (relay, secret, admin)
    }

    /// `parley call` for `identity` in room standup, talking a tone, its control socket under `runtime`.
    static func call(_ identity: String, relay: Relay, secret: SecretFile, moderator: Bool = false, runtime: String, input: String) throws -> Process {
        try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true)
        let now = WallClock.seconds()
        let token = AccessToken(identity: identity, room: "standup", issuedAt: now, expiresAt: now + 600, isModerator: moderator).signed(with: secret.tokenSecret)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binaries + "/parley")
        process.arguments = ["call", "--relay", "127.0.0.1:\(relay.localAddress.port!)", "--room", "standup", "--token", token,
                             "--relay-key=" + secret.relayKey!.publicKeyText, "--input", input, "--output", runtime + "/heard.wav",
                             "--aec", "off", "--duration", "60", "--quiet"]
        process.environment = ["XDG_RUNTIME_DIR": runtime, "PATH": "/usr/bin:/bin"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        ChildProcesses.started(process)
        return process
    }

    /// Waits until `relay` has `count` active members.
    static func waitForMembers(_ count: Int, on relay: Relay) async throws {
        for _ in 0..<100 {
            let metrics = try relay.metricsText()
            if metrics.contains(#"parley_relay_members{state="active"} \#(count)"#) { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw Failure(description: "\(count) members did not join")
    }

    static func stop(_ processes: [Process]) {
        for process in processes where process.isRunning { process.interrupt() }
        for process in processes { process.waitUntilExit() }
    }

    @Test func theCtlAndModeratorExamplesDriveARunningCall() async throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let input = try Self.tone(in: directory, seconds: 60)
        let (relay, secret, admin) = try Self.relay(in: directory)
        defer {
            relay.shutdown()
            admin.close()
        }
        let runtime = directory + "/run"
        // Bob's call answers its own socket elsewhere, so ctl finds one call here, as the README's first lines assume.
        let bob = try Self.call("bob", relay: relay, secret: secret, runtime: directory + "/bob", input: input)
        var ada = try Self.call("ada", relay: relay, secret: secret, moderator: true, runtime: runtime, input: input)
        defer { Self.stop([bob, ada]) }
        try await Self.waitForMembers(2, on: relay)
        try await Task.sleep(for: .seconds(1))
        let environment = ["XDG_RUNTIME_DIR": runtime]
        try Self.runEach(try Self.block(startingWith: "parley ctl mute"), [], in: directory, environment: environment)
        await ada.exited()
        #expect(ada.terminationStatus == 0, "`parley ctl leave` ends the call cleanly")

        ada = try Self.call("ada", relay: relay, secret: secret, moderator: true, runtime: runtime, input: input)
        try await Self.waitForMembers(2, on: relay)
        try Self.runEach(try Self.block(startingWith: "parley ctl server-mute"), [], in: directory, environment: environment)
        await bob.exited()
        await ada.exited()
        #expect(bob.terminationStatus == 12, "the kick ends bob's call as a kick does")
        #expect(ada.terminationStatus == 13, "close-room ends the moderator's own call too")
    }

    @Test func theAdminExamplesActOnARunningRelay() async throws {
        for start in ["parley-relay admin rooms", "TOKEN=$(sed"] {
            let directory = try Self.folder()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let input = try Self.tone(in: directory, seconds: 60)
            let (relay, secret, adminServer) = try Self.relay(in: directory)
            defer {
                relay.shutdown()
                adminServer.close()
            }
            // Bob is kicked; cy keeps the room open for the examples after the kick.
            let bob = try Self.call("bob", relay: relay, secret: secret, runtime: directory + "/bob", input: input)
            let cy = try Self.call("cy", relay: relay, secret: secret, runtime: directory + "/cy", input: input)
            defer { Self.stop([bob, cy]) }
            try await Self.waitForMembers(2, on: relay)
            let admin = "127.0.0.1:\(adminServer.localAddress!.port!)"
            let substitutions = [("/etc/parley", directory), ("127.0.0.1:9800", admin)]
            let block = try Self.block(startingWith: start)
            if start.hasPrefix("TOKEN") {
                // One shell: the token the first line reads is the later lines' variable.
                let (status, output) = try Self.shell(block.map { Self.substituted($0, substitutions) }.joined(separator: "\n"), in: directory)
                print("$ \(block.joined(separator: "\n$ "))\n\(output)")
                #expect(status == 0 && output.contains(#""identity":"bob""#) && output.contains(#""ok":true"#), "\(output)")
            } else {
                // parley-relay admin finds the relay as serve would: here through its variables.
                try Self.runEach(block, substitutions, in: directory, environment: ["PARLEY_RELAY_ADMIN": admin, "PARLEY_RELAY_SECRET_FILE": directory + "/relay.secret"])
            }
            await bob.exited()
            #expect(bob.terminationStatus == 12, "the example's kick removed bob")
        }
    }

    @Test func theRelayByHandMintsAnInviteACallJoinsWith() async throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let input = try Self.tone(in: directory, seconds: 10)
        let block = try Self.block(startingWith: "parley-relay keygen --out /etc/parley/relay.secret")
        // Building and installing is what the test's own build did; the rest runs as written.
        let skipped = block.filter { $0.hasPrefix("swift build") || $0.hasPrefix("install ") }
        #expect(skipped.count == 2, "the block builds and installs the relay: \(skipped)")
        let udp = try freeUDPPort(host: "127.0.0.1")
        let environment = ["PARLEY_RELAY_LISTEN": "127.0.0.1:\(udp)", "PARLEY_RELAY_ADMIN": "127.0.0.1:\(try freeTCPPort())"]
        let substitutions = [("/etc/parley", directory + "/etc"), ("relay.example.org:7800", "127.0.0.1:\(udp)")]
        var invite = ""
        for line in block where !skipped.contains(line) {
            var command = Self.substituted(line, substitutions)
            // In the background, as a second terminal would run it (the line may end in a comment).
            if line.hasPrefix("parley-relay serve") { command = "(\nexec " + command + "\n) > serve.log 2>&1 &\necho $! > serve.pid\nsleep 1" }
            let (status, output) = try Self.shell(command, in: directory, environment: environment)
            print("$ \(line)\n\(output)")
            #expect(status == 0, "`\(line)` exited \(status): \(output)")
            if line.hasPrefix("parley-relay token") { invite = output.split(separator: "\n").last.map(String.init) ?? "" }
        }
        defer { _ = try? Self.shell("kill $(cat serve.pid)", in: directory) }
        #expect(invite.hasPrefix("parley://127.0.0.1:\(udp)/standup?token="), "the last line is the invite: \(invite)")
        let (status, output) = try Self.shell("parley call '\(invite)' --input \(input) --output heard.wav --aec off --duration 2 --quiet", in: directory)
        #expect(status == 0, "a call joins with the invite the README mints: \(output)")
    }

    /// The three-relay recipe, then the same relays in regions: the invites it mints (with the
    /// secret file of the relay each names) take real calls into the cluster.
    @Test func theClusterRecipeAndItsRegionsMintInvitesCallsJoinWith() async throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let input = try Self.tone(in: directory, seconds: 10)
        let client = try freeTCPPort(), peer = try freeTCPPort()
        let hosts = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        let udp = try freePort(on: hosts, type: SOCK_DGRAM), admin = try freePort(on: hosts, type: SOCK_STREAM)
        let substitutions = [("/tmp/parley-etcd", directory + "/etcd"), ("127.0.0.1:2379", "127.0.0.1:\(client)"), (":7800", ":\(udp)"), (":9800", ":\(admin)")]
        // etcd on ports of the test's: its own variables, the command line as written.
        let etcd = [
            "ETCD_LISTEN_CLIENT_URLS": "http://127.0.0.1:\(client)", "ETCD_ADVERTISE_CLIENT_URLS": "http://127.0.0.1:\(client)",
            "ETCD_LISTEN_PEER_URLS": "http://127.0.0.1:\(peer)", "ETCD_INITIAL_ADVERTISE_PEER_URLS": "http://127.0.0.1:\(peer)",
            "ETCD_INITIAL_CLUSTER": "default=http://127.0.0.1:\(peer)",
        ]
        func runRecipe(_ start: String) throws -> [String] {
            let block = try Self.block(startingWith: start)
            let script = block.map { Self.substituted($0, substitutions) }.joined(separator: "\n") + "\njobs -p >> pids"
            let (status, output) = try Self.shell(script, in: directory, environment: etcd)
            print("$ \(block.joined(separator: "\n$ "))\n\(output.suffix(1_500))")
            #expect(status == 0, "the recipe exited \(status): \(output.suffix(800))")
            return output.split(separator: "\n").map(String.init).filter { $0.hasPrefix("parley://") }
        }
        defer { _ = try? Self.shell("kill $(cat pids) 2>/dev/null; sleep 0.5", in: directory) }
        let invites = try runRecipe("etcd --data-dir")
        #expect(invites.count == 1)
        try await Task.sleep(for: .seconds(2))
        let (status, output) = try Self.shell("parley call '\(invites.first ?? "")' --input \(input) --output ada.wav --aec off --duration 2 --quiet", in: directory)
        #expect(status == 0, "a call joins the cluster with the recipe's invite: \(output)")

        // The relays go (etcd stays), and come back in regions of their own.
        _ = try Self.shell("kill $(tail -n +2 pids) 2>/dev/null; sleep 1", in: directory)
        let regional = try runRecipe("parley-relay token --secret-file r2.secret")
        #expect(regional.count == 2, "an invite for ada on relay 1 and one for bob on relay 2: \(regional)")
        guard regional.count == 2 else { return }
        try await Task.sleep(for: .seconds(2))
        let calls = regional.enumerated().map { index, invite in
            "(parley call '\(invite)' --input \(input) --output \(index).wav --aec off --duration 3 --quiet; echo \"call \(index) exited $?\") &"
        }.joined(separator: "\n") + "\nwait"
        let (_, joined) = try Self.shell(calls, in: directory)
        print(joined)
        #expect(joined.contains("call 0 exited 0") && joined.contains("call 1 exited 0"), "both regions' invites join (a wrong key exits 4): \(joined)")
    }
}
