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
