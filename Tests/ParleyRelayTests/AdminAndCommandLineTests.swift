import ParleyBasics
import ParleyRelay
import ParleyRelayTestSupport
import ParleyWire
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The admin port over real HTTP, and the `parley-relay` binary as a person runs it.
extension RelayOverUDP {
    @Suite("Admin port and command line")
    struct AdminAndCommandLineTests {
        @Test func metricsParseAsPrometheusAndPerStreamSeriesLeaveWithTheirMember() throws {
            let fixture = try RelayFixture.start(admin: true)
            defer { fixture.stop() }
            let members = try fixture.room("metrics", size: 2)
            for sequence in 0..<30 { members[0].sendRTP(sequence: UInt16(sequence)) }
            members[1].pump(timeout: 2) { $0.mediaInbox.count >= 30 }
            usleep(1_200_000)  // one receiver report interval, so the upstream gauges are set
            let adminPort = try #require(fixture.adminPort)
            let (status, body) = try httpGet(port: adminPort, path: "/metrics")
            #expect(status == 200)
            try checkPrometheusText(body)
            #expect(metricValue(body, #"parley_relay_packets_sent_total{kind="media"}"#) == 30)
            #expect(metricValue(body, #"parley_relay_members{state="active"}"#) == 2)
            #expect(metricValue(body, "parley_relay_rooms") == 1)
            #expect(body.contains(#"parley_relay_upstream_loss_ratio{room="metrics",identity="member-0"}"#))
            #expect(body.contains(#"parley_relay_forwarding_latency_seconds_bucket{le="0.001"}"#))
            #expect(try httpGet(port: adminPort, path: "/healthz") == (200, "ok\n"))
            #expect(try httpGet(port: adminPort, path: "/nope").0 == 404)

            members[0].send(ControlMessage(sequence: 1, isReliable: true, body: .leave(.init())))
            #expect(members[1].waitForRoster(["member-1"]))
            let after = try httpGet(port: adminPort, path: "/metrics").1
            #expect(!after.contains(#"identity="member-0""#), "the leaver's per-stream series are gone")
            #expect(metricValue(after, #"parley_relay_members_removed_total{reason="left"}"#) == 1)
        }

        // MARK: The binary

        @Test func keygenTokenAndServeWorkTogetherAndSIGTERMEndsWithinTwoSeconds() throws {
            let secret = "/tmp/parley-cli-test-\(getpid()).secret"
            defer { unlink(secret) }
            let keygen = try run(["keygen", "--out", secret])
            #expect(keygen.status == 0)
            #expect(try run(["keygen", "--out", secret]).status == 2, "refuses to overwrite without --force")

            let token = try run(["token", "--secret-file", secret, "--room", "standup", "--identity", "ada", "--ttl", "2h", "--relay", "127.0.0.1:7800"])
            #expect(token.status == 0)
            let lines = token.output.split(separator: "\n")
            let invite = try InviteURL(parsing: String(lines.last ?? ""))
            #expect(invite.room == "standup" && invite.port == 7800 && invite.token == String(lines.first ?? ""))
            #expect(invite.relayKeyText?.count == 43, "the invite carries the relay's public key for the client to pin")
            let regional = try run(["token", "--secret-file", secret, "--room", "standup", "--identity", "bo", "--region", "eu-west", "--relay", "127.0.0.1:7800"])
            let secretFile = try SecretFile.load(path: secret)
            let claims = try AccessToken.verify(String(regional.output.split(separator: "\n").first ?? ""), secret: secretFile.tokenSecret, room: "standup", now: WallClock.seconds())
            #expect(claims.region == "eu-west", "the token names the region the person joins in")

            // serve, with a member in a room; SIGTERM tells the member goodbye and exits 0 within 2 s.
            let port = freeUDPPort()
            // The plaintext test client needs --insecure; SecureRelayTests join an encrypted relay.
            let server = try spawn(["serve", "--secret-file", secret, "--listen", "127.0.0.1:\(port)", "--admin", "off", "--log-level", "warning", "--insecure"])
            defer { kill(server.pid, SIGKILL) }
            let member = TestClient(relayPort: Int(port))
            guard case .joined = member.join(room: "standup", token: String(lines.first ?? ""), ssrc: 7), member.ready() else {
                Issue.record("could not join the spawned relay"); return
            }
            kill(server.pid, SIGTERM)
            let started = now()
            var status: Int32 = 0
            member.pump(timeout: 2) { !$0.goodbyes.isEmpty }
            waitpid(server.pid, &status, 0)
            let took = now() - started
            print("serve exited \((status >> 8) & 0xFF) \(Int(took * 1000)) ms after SIGTERM; the member heard: \(member.goodbyes.map(\.reason))")
            #expect(member.goodbyes.first?.reason == .relayShuttingDown)
            #expect(status & 0x7F == 0 && (status >> 8) & 0xFF == 0)
            #expect(took < 2)
        }

        @Test func badFlagsExitWithTwoAndSayWhatToFix() throws {
            let cases: [([String], String)] = [
                (["serve", "--max-rooms", "lots", "--secret-file", "/nonexistent"], "--max-rooms is \"lots\""),
                (["serve", "--listen", "nowhere"], "--listen is \"nowhere\""),
                (["serve", "--secret-file", "/nonexistent/secret", "--listen", "127.0.0.1:0", "--admin", "off"], "keygen"),
                (["token", "--room", "bad room", "--identity", "ada"], "--room"),
                (["token", "--room", "r", "--identity", "ada", "--ttl", "forever"], "--ttl"),
                (["token", "--room", "r", "--identity", "ada", "--region", "eu/west"], "--region is \"eu/west\""),
                (["serve", "--no-such-flag"], "no-such-flag"),
            ]
            for (arguments, expected) in cases {
                let result = try run(arguments)
                print("parley-relay \(arguments.joined(separator: " ")) → \(result.status): \(result.errors.split(separator: "\n").first ?? "")")
                #expect(result.status == 2, "\(arguments)")
                #expect(result.errors.contains(expected), "\(arguments): \(result.errors)")
            }
        }
    }
}

// MARK: Helpers

/// A UDP port nothing listens on right now.
func freeUDPPort() -> UInt16 {
    let probe = TestClient(relayPort: 9)
    return probe.port
}

/// The `parley-relay` binary built beside the test bundle.
func relayBinary() throws -> String {
    var buffer = [CChar](repeating: 0, count: 4096)
    let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    guard count > 0 else { throw TestFailure("cannot find the test executable") }
    var path = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    while !path.isEmpty {
        path = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
        let candidate = path + "/parley-relay"
        if access(candidate, X_OK) == 0 { return candidate }
    }
    throw TestFailure("parley-relay is not built; run `swift build --build-tests` first")
}

struct Spawned {
    let pid: pid_t
    let output: Int32
    let errors: Int32
}

func spawn(_ arguments: [String]) throws -> Spawned {
    let binary = try relayBinary()
    var out: [Int32] = [0, 0], err: [Int32] = [0, 0]
    pipe(&out)
    pipe(&err)
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    posix_spawn_file_actions_adddup2(&actions, out[1], 1)
    posix_spawn_file_actions_adddup2(&actions, err[1], 2)
    posix_spawn_file_actions_addclose(&actions, out[0])
    posix_spawn_file_actions_addclose(&actions, err[0])
    let argv = ([binary] + arguments).map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    var pid: pid_t = 0
    let result = posix_spawn(&pid, binary, &actions, nil, argv, environ)
    posix_spawn_file_actions_destroy(&actions)
    close(out[1])
    close(err[1])
    guard result == 0 else { throw TestFailure("posix_spawn failed: \(result)") }
    return Spawned(pid: pid, output: out[0], errors: err[0])
}

func readAll(_ descriptor: Int32) -> String {
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        if count <= 0 { break }
        bytes += chunk[..<count]
    }
    close(descriptor)
    return String(decoding: bytes, as: UTF8.self)
}

func run(_ arguments: [String]) throws -> (status: Int32, output: String, errors: String) {
    let process = try spawn(arguments)
    let output = readAll(process.output)
    let errors = readAll(process.errors)
    var status: Int32 = 0
    waitpid(process.pid, &status, 0)
    return ((status >> 8) & 0xFF, output, errors)
}

/// A GET over a plain TCP socket: (status, body).
func httpGet(port: Int, path: String) throws -> (Int, String) {
    guard let connection = LoopbackTCP(port: port) else { throw TestFailure("cannot connect to the admin port") }
    connection.send("GET \(path) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    let response = readAll(dup(connection.descriptor))
    // Swift treats "\r\n" as one Character, so split on that.
    let parts = response.split(separator: "\r\n", maxSplits: Int.max, omittingEmptySubsequences: false)
    guard let blank = parts.firstIndex(of: "") else { throw TestFailure("no HTTP response") }
    let status = Int(parts[0].split(separator: " ").dropFirst().first ?? "") ?? 0
    return (status, parts[(blank + 1)...].joined(separator: "\r\n"))
}

/// Checks the Prometheus text format line by line: comments, or `name{labels} value`.
func checkPrometheusText(_ text: String) throws {
    var samples = 0
    for line in text.split(separator: "\n") where !line.hasPrefix("#") {
        guard let space = line.lastIndex(of: " ") else { throw TestFailure("no value in \(line)") }
        let series = line[..<space]
        #expect(Double(line[line.index(after: space)...]) != nil, "value of \(line)")
        let name = series.prefix { $0 != "{" }
        #expect(name.allSatisfy { $0.isLetter || $0.isNumber || $0 == "_" || $0 == ":" } && !name.isEmpty, "name of \(line)")
        if series.contains("{") {
            #expect(series.hasSuffix("}"), "labels of \(line)")
            let labels = series.drop { $0 != "{" }.dropFirst().dropLast()
            // label="value" pairs, values with \" and \\ escaped.
            var inQuotes = false, escaped = false
            for character in labels {
                if escaped { escaped = false; continue }
                if character == "\\" { escaped = true; continue }
                if character == "\"" { inQuotes.toggle() }
            }
            #expect(!inQuotes, "unbalanced quotes in \(line)")
        }
        samples += 1
    }
    #expect(samples > 20)
}
