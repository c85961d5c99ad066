@testable import ParleyRelay
import ParleyBasics
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Relay configuration, config file and secret file")
struct ConfigurationTests {
    @Test func defaultsSuitAVPS() throws {
        let configuration = try RelayConfiguration.resolve(flags: [:], environment: [:], file: nil)
        #expect(configuration.listen.description == "0.0.0.0:7800")
        #expect(configuration.limits.idleTimeoutMilliseconds == 30_000)
        #expect(configuration.limits.keepaliveIntervalMilliseconds == 5_000)
    }

    @Test func flagsWinOverEnvironmentWhichWinsOverTheFile() throws {
        let file = try KeyValueFile(parsing: """
            # relay.conf
            max-rooms = 10
            max-members-per-room = 7
            idle-timeout = 45s
            listen = [::]:7801
            """, source: "relay.conf")
        let configuration = try RelayConfiguration.resolve(
            flags: ["max-rooms": "30"],
            environment: ["PARLEY_RELAY_MAX_ROOMS": "20", "PARLEY_RELAY_MAX_MEMBERS_PER_ROOM": "8", "HOME": "/root"],
            file: file)
        #expect(configuration.limits.maximumRooms == 30)
        #expect(configuration.limits.maximumMembersPerRoom == 8)
        #expect(configuration.limits.idleTimeoutMilliseconds == 45_000)
        #expect(configuration.listen == HostAndPort(host: "::", port: 7801))
    }

    @Test("bad values are refused with a message naming where they came from")
    func badValuesNameTheirSource() throws {
        func message(flags: [String: String] = [:], environment: [String: String] = [:], file: String? = nil) -> String? {
            do {
                let parsed = try file.map { try KeyValueFile(parsing: $0, source: "relay.conf") }
                _ = try RelayConfiguration.resolve(flags: flags, environment: environment, file: parsed)
                return nil
            } catch {
                return (error as? ConfigurationError)?.message ?? "\(error)"
            }
        }
        let cases: [(String?, String)] = [
            (message(flags: ["max-rooms": "many"]), "--max-rooms is \"many\""),
            (message(flags: ["max-rooms": "0"]), "--max-rooms is 0; it must be from 1"),
            (message(flags: ["listen": "7800"]), "--listen is \"7800\" with no port"),
            (message(flags: ["listen": "example.org:7800"]), "is not an IP address"),
            (message(flags: ["idle-timeout": "soon"]), "--idle-timeout is \"soon\"; write a duration"),
            (message(flags: ["idle-timeout": "6s", "keepalive-interval": "5s"]), "must be at least twice keepalive-interval"),
            (message(flags: ["log-level": "loud"]), "--log-level is \"loud\""),
            (message(environment: ["PARLEY_RELAY_THREADS": "0"]), "PARLEY_RELAY_THREADS is 0"),
            (message(environment: ["PARLEY_RELAY_MAX_ROMS": "3"]), "unknown environment variable PARLEY_RELAY_MAX_ROMS"),
            (message(file: "max-rooms = 5\nmax-rooms = 6"), "relay.conf:2: max-rooms is already set on line 1"),
            (message(file: "colour = blue"), "relay.conf:1: unknown setting \"colour\""),
            (message(file: "just words"), "relay.conf:1: expected `key = value`"),
            (message(file: "socket-buffer = 1TiB"), "relay.conf:1: socket-buffer is \"1TiB\""),
            (message(flags: ["max-member-bitrate": "fast"]), "--max-member-bitrate is \"fast\"; write a bitrate such as 640k"),
            (message(flags: ["max-member-bitrate": "8k"]), "--max-member-bitrate is 8k; it must be from 16 kbit/s"),
            (message(flags: ["max-member-bitrate": "16k", "max-packet-size": "9000"]), "must let a member send at least one packet of max-packet-size"),
        ]
        for (actual, expected) in cases {
            print(actual ?? "(accepted)")
            #expect(actual?.contains(expected) == true, "expected a message containing \(expected), got \(actual ?? "nothing")")
        }
    }

    /// Config text, durations and addresses come from people and files: any bytes give a
    /// value or a ConfigurationError, never a trap.
    @Test func parsersSurviveAnyText() {
        var rng = SeededGenerator(seed: 0xC0_F1_6E)
        let pieces = ["=", " ", "\n", "#", "max-rooms", "listen", "idle-timeout", "[", "]", ":", "7800", "1h", "ms", "é", "\u{0}", "MiB", "-", "0.0.0.0", "::"]
        var accepted = 0
        for round in 0..<10_000 {
            let text: String
            if round % 2 == 0 {
                text = String(decoding: rng.bytes(count: Int.random(in: 0...80, using: &rng)), as: UTF8.self)
            } else {
                text = (0..<Int.random(in: 0...12, using: &rng)).map { _ in pieces.randomElement(using: &rng)! }.joined()
            }
            _ = DurationText.milliseconds(text)
            _ = try? HostAndPort(parsing: text)
            _ = try? RelayConfiguration.parseByteCount(text, in: 1...(1 << 30))
            _ = try? RelayConfiguration.parseBitrate(text, in: 1...1_000_000_000)
            if let file = try? KeyValueFile(parsing: text, source: "fuzz"),
               (try? RelayConfiguration.resolve(flags: [:], environment: [:], file: file)) != nil {
                accepted += 1
            }
            _ = try? SecretFile(parsing: text, source: "fuzz")
        }
        print("10,000 random config texts: \(accepted) accepted as configuration, the rest refused with a message")
    }

    @Test func durationsAndSizesReadAsPeopleWriteThem() throws {
        #expect(DurationText.milliseconds("30s") == 30_000)
        #expect(DurationText.milliseconds("500ms") == 500)
        #expect(DurationText.milliseconds("1h30m") == 5_400_000)
        #expect(DurationText.milliseconds("7d") == 604_800_000)
        #expect(DurationText.milliseconds("12") == 12_000)
        #expect(DurationText.milliseconds("h") == nil)
        #expect(DurationText.milliseconds("5 s") == nil)
        #expect(DurationText.milliseconds("9999999999999999d") == nil)
        #expect(try RelayConfiguration.parseByteCount("4MiB", in: 1...(1 << 30)) == 4 << 20)
        #expect(try RelayConfiguration.parseByteCount("512K", in: 1...(1 << 30)) == 512 << 10)
        #expect(try RelayConfiguration.parseBitrate("640k", in: 1...1_000_000_000) == 640_000)
        #expect(try RelayConfiguration.parseBitrate("2Mbit/s", in: 1...1_000_000_000) == 2_000_000)
        #expect(try RelayConfiguration.parseBitrate("1.5M", in: 1...1_000_000_000) == 1_500_000)
        #expect(try RelayConfiguration.parseBitrate("64000", in: 1...1_000_000_000) == 64_000)
        #expect(throws: ConfigurationError.self) { try RelayConfiguration.parseBitrate("1e300k", in: 1...1_000_000_000) }
    }

    @Test func theSecretFileIsPrivateAndNeverSilentlyReplaced() throws {
        let path = "/tmp/parley-relay-secret-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { unlink(path) }
        let secret = SecretFile.random()
        try secret.write(path: path, overwrite: false)
        var info = stat()
        #expect(stat(path, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        #expect(throws: ConfigurationError.self) { try SecretFile.random().write(path: path, overwrite: false) }
        let loaded = try SecretFile.load(path: path)
        #expect(loaded.tokenSecret.base64 == secret.tokenSecret.base64)
        try SecretFile.random().write(path: path, overwrite: true)
        #expect(try SecretFile.load(path: path).tokenSecret.base64 != secret.tokenSecret.base64)
        #expect(secret.text.contains("token-secret = "))
    }

    @Test func aShortOrMissingSecretIsExplained() {
        #expect(throws: ConfigurationError.self) { try SecretFile(parsing: "token-secret = AAAA", source: "s") }
        do { _ = try SecretFile(parsing: "# nothing", source: "s") } catch {
            #expect(error.message.contains("keygen"))
        }
        do { _ = try SecretFile.load(path: "/nonexistent/secret") } catch {
            #expect(error.message.contains("cannot read the secret file /nonexistent/secret"))
        }
    }
}
