import ArgumentParser
import Crypto
import NIOCore
import ParleyRelay
import ParleyWire

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// `parley-bench relay-memory`: the relay's resident memory as a VPS owner sees it in `top`,
/// read from /proc/PID/status. The relay runs as the systemd unit runs it (default threads
/// and socket buffers, admin port on); first idle, then with R rooms × T talkers sending
/// 20 ms Opus-sized packets at 50/s, twice in a row so growth between the two (a leak) shows.
/// The baseline, measured in the same run, is the relay's own idle footprint: the loaded
/// figures are reported against it, and per talker.
struct RelayMemoryBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay-memory",
        abstract: "Resident memory of parley-relay idle and with rooms of talkers (from /proc).",
        discussion: """
        Measure the binary you deploy:
          Deploy/build-relay.sh && swift build -c release --product parley-bench
          .build/release/parley-bench relay-memory --relay-binary .build/deploy/parley-relay
        """
    )

    @Option(help: "The parley-relay binary (default: beside this one).")
    var relayBinary: String?
    @Option(help: "Rooms open at once.")
    var rooms: Int = 10
    @Option(help: "Talkers in each room.")
    var talkers: Int = 5
    @Option(help: "Seconds of traffic in each of the two loaded phases.")
    var seconds: Double = 10
    @Option(help: "Seconds the idle relay settles before it is measured.")
    var settle: Double = 2
    @Option(help: "Bytes of RTP payload per packet (an Opus frame at 32 kb/s is about 80).")
    var payload: Int = 80
    @Flag(help: "Print the results as JSON on stdout.")
    var json = false

    func validate() throws {
        guard (1...1000).contains(rooms) else { throw ValidationError("--rooms takes 1 to 1000") }
        guard (2...50).contains(talkers) else { throw ValidationError("--talkers takes 2 to 50 (the relay's default room limit)") }
        guard seconds >= 1, settle >= 0 else { throw ValidationError("--seconds must be at least 1 and --settle at least 0") }
    }

    func run() throws {
        raiseFileLimit()
        let binary = try relayBinary ?? RelayBenchmark.siblingRelayBinary()
        let relay = try ServiceLikeRelay(binary: binary)
        defer { relay.stop() }
        usleep(UInt32(settle * 1_000_000))
        let idle = try ResidentMemory(pid: relay.pid)
        log("idle: \(idle.line)")

        let generator = try LoadGenerator(rooms: rooms, members: talkers, payload: payload, forwarder: relay)
        let joined = try ResidentMemory(pid: relay.pid)
        log("\(rooms) rooms × \(talkers) joined: \(joined.line)")
        let first = try generator.run(seconds: seconds, forwarder: relay)
        let loaded = try ResidentMemory(pid: relay.pid)
        log("after \(Int(seconds)) s of talk: \(loaded.line); \(first.line)")
        // The generator counts what each member sent per run from zero only once; reset it so
        // the second phase's loss is its own.
        for index in generator.members.indices { generator.members[index].sentInWindow = 0 }
        let second = try generator.run(seconds: seconds, forwarder: relay)
        let loadedAgain = try ResidentMemory(pid: relay.pid)
        log("after \(Int(seconds)) s more: \(loadedAgain.line); \(second.line)")

        let report = RelayMemoryReport(
            rooms: rooms, talkersPerRoom: talkers, secondsPerPhase: seconds, threads: System.coreCount,
            idle: idle, joined: joined, loaded: loaded, loadedAgain: loadedAgain,
            loadedOverIdle: Double(loaded.residentKiB) / Double(idle.residentKiB),
            kibPerTalker: Double(loaded.residentKiB - idle.residentKiB) / Double(rooms * talkers),
            growthBetweenPhasesKiB: loadedAgain.residentKiB - loaded.residentKiB,
            loss: max(first.loss, second.loss),
            forwardedPacketsPerSecond: second.forwardedPacketsPerSecond)
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(report), as: UTF8.self))
        } else {
            print(report.table)
        }
    }
}

/// VmRSS and its parts, VmHWM (the peak) from /proc/PID/status, in KiB.
struct ResidentMemory: Codable {
    var residentKiB: Int
    var anonymousKiB: Int
    var fileKiB: Int
    var peakKiB: Int

    init(pid: pid_t) throws {
        guard let file = fopen("/proc/\(pid)/status", "r") else {
            throw ValidationError("cannot read /proc/\(pid)/status; did the relay exit?")
        }
        defer { fclose(file) }
        var values: [String: Int] = [:]
        var line = [CChar](repeating: 0, count: 512)
        while fgets(&line, Int32(line.count), file) != nil {
            let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let parts = text.split(whereSeparator: { $0 == ":" || $0 == " " || $0 == "\t" || $0 == "\n" })
            if parts.count >= 2, let value = Int(parts[1]) { values[String(parts[0])] = value }
        }
        residentKiB = values["VmRSS"] ?? 0
        anonymousKiB = values["RssAnon"] ?? 0
        fileKiB = values["RssFile"] ?? 0
        peakKiB = values["VmHWM"] ?? 0
    }

    var line: String {
        "RSS \(mebibytes(residentKiB)) (anonymous \(mebibytes(anonymousKiB)), file-backed \(mebibytes(fileKiB))), peak \(mebibytes(peakKiB))"
    }
}

func mebibytes(_ kib: Int) -> String {
    let tenths = (kib * 10 + 512) / 1024
    return "\(tenths / 10).\(tenths % 10) MiB"
}

struct RelayMemoryReport: Codable {
    var rooms: Int
    var talkersPerRoom: Int
    var secondsPerPhase: Double
    var threads: Int
    var idle: ResidentMemory
    var joined: ResidentMemory
    var loaded: ResidentMemory
    var loadedAgain: ResidentMemory
    var loadedOverIdle: Double
    var kibPerTalker: Double
    var growthBetweenPhasesKiB: Int
    var loss: Double
    var forwardedPacketsPerSecond: Double

    var table: String {
        """
        parley-relay resident memory (\(threads) event loops), \(rooms) rooms × \(talkersPerRoom) talkers at 50 packets/s
        | state | RSS | anonymous | file-backed | peak |
        | --- | --- | --- | --- | --- |
        | idle (baseline) | \(mebibytes(idle.residentKiB)) | \(mebibytes(idle.anonymousKiB)) | \(mebibytes(idle.fileKiB)) | \(mebibytes(idle.peakKiB)) |
        | joined, silent | \(mebibytes(joined.residentKiB)) | \(mebibytes(joined.anonymousKiB)) | \(mebibytes(joined.fileKiB)) | \(mebibytes(joined.peakKiB)) |
        | after \(Int(secondsPerPhase)) s of talk | \(mebibytes(loaded.residentKiB)) | \(mebibytes(loaded.anonymousKiB)) | \(mebibytes(loaded.fileKiB)) | \(mebibytes(loaded.peakKiB)) |
        | after \(Int(secondsPerPhase)) s more | \(mebibytes(loadedAgain.residentKiB)) | \(mebibytes(loadedAgain.anonymousKiB)) | \(mebibytes(loadedAgain.fileKiB)) | \(mebibytes(loadedAgain.peakKiB)) |
        loaded / idle: \((loadedOverIdle * 100).rounded() / 100)×; \(Int(kibPerTalker.rounded())) KiB per talker; \
        growth between the two loaded phases: \(growthBetweenPhasesKiB) KiB; loss \(percent(loss)); \
        \(Int(forwardedPacketsPerSecond)) packets/s forwarded
        """
    }
}

/// `parley-relay serve` as the installed unit runs it with the relay.conf install.sh writes
/// (every core, default socket buffers, the admin port on localhost), with a secret its own
/// `keygen` made: encrypted, as installed, so the load generator joins by handshake and
/// seals every packet with the relay's public key from that file.
final class ServiceLikeRelay: Forwarder {
    let port: UInt16
    let pid: pid_t
    let secret: TokenSecret
    let secretPath: String
    let relayKey: Curve25519.KeyAgreement.PublicKey?
    var needsJoin: Bool { true }

    init(binary: String) throws {
        port = freeUDPPort()
        secretPath = "/tmp/parley-bench-memory-\(getpid()).secret"
        unlink(secretPath)
        guard Self.run([binary, "keygen", "--out", secretPath]) else { throw ValidationError("\(binary) keygen failed") }
        let secrets = try SecretFile.load(path: secretPath)
        secret = secrets.tokenSecret
        guard let key = secrets.relayKey?.publicKey else { throw ValidationError("\(binary) keygen wrote no relay key pair") }
        relayKey = key
        let arguments = [binary, "serve", "--listen", "127.0.0.1:\(port)", "--admin", "127.0.0.1:0",
                         "--secret-file", secretPath, "--log-level", "warning"]
        pid = try Self.spawn(arguments)
        usleep(300_000)
        var status: Int32 = 0
        guard waitpid(pid, &status, WNOHANG) == 0 else { throw ValidationError("\(binary) exited at once; run it by hand to see why") }
    }

    func setRooms(_ rooms: [[sockaddr_in]]) {}

    var token: (String, String) -> String { hourLongTokens(signedWith: secret) }

    func cpuSeconds() -> Double { processCPUSeconds(path: "/proc/\(pid)/stat") }

    func stop() {
        kill(pid, SIGTERM)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        unlink(secretPath)
    }

    /// Starts `arguments` with its standard output discarded.
    static func spawn(_ arguments: [String]) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        guard posix_spawn(&child, arguments[0], &actions, nil, argv, environ) == 0 else {
            throw ValidationError("cannot start \(arguments[0])")
        }
        return child
    }

    /// Runs to completion; true on exit 0.
    static func run(_ arguments: [String]) -> Bool {
        guard let child = try? spawn(arguments) else { return false }
        var status: Int32 = 0
        waitpid(child, &status, 0)
        return status == 0
    }
}
