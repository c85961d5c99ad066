import ParleyWire
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The unit's SystemCallFilter answers EPERM to anything outside the list; a relay that needs
/// a call outside it would fail on a VPS in a way no other test here shows. So the relay runs
/// a call under strace, and every system call it made must be one the unit allows.
@Suite("Deploy: the unit's system call filter")
struct SystemCallFilterTests {
    @Test func everySystemCallTheRelayMakesInACallIsOneItsUnitAllows() throws {
        guard let strace = Command.find("strace"), let analyze = Command.find("systemd-analyze") else {
            Issue.record("strace or systemd-analyze is missing; Scripts/bootstrap installs both")
            return
        }
        let allowed = try Self.allowedSystemCalls(analyze: analyze, unit: readText(Repository.deploy + "/parley-relay.service"))
        #expect(allowed.contains("sendmmsg") && !allowed.contains("setuid"), "the filter was read: \(allowed.count) calls allowed")

        let folder = try TemporaryRoot()
        let binary = try Repository.builtRelay()
        let secret = folder.path + "/relay.secret"
        try Command.run([binary, "keygen", "--out", secret]).expectSuccess()
        let relayPort = freePort(type: Int32(SOCK_DGRAM.rawValue)), adminPort = freePort(type: Int32(SOCK_STREAM.rawValue))
        let trace = folder.path + "/syscalls.txt"
        let log = folder.path + "/relay.log"
        let pid = try Command.spawn([strace, "-f", "-qq", "-c", "-o", trace, binary, "serve", "--listen", "127.0.0.1:\(relayPort)",
                                     "--admin", "127.0.0.1:\(adminPort)", "--secret-file", secret],
                                    standardOutput: log, standardError: log + ".err")
        var reaped = false
        defer { if !reaped { kill(pid, SIGKILL); var status: Int32 = 0; waitpid(pid, &status, 0) } }

        // Everything a relay does in service: start, /healthz, a scrape (which reads
        // /proc/net/udp), two members joining and talking, and a SIGTERM with goodbyes.
        var healthy = false
        for _ in 0..<200 where !healthy {
            healthy = (try? httpGet(port: adminPort, path: "/healthz"))?.0 == 200
            if !healthy { usleep(50_000) }
        }
        #expect(healthy, "the traced relay answers: \(readText(log + ".err"))")
        #expect(try httpGet(port: adminPort, path: "/metrics").0 == 200)
        let callers = try ["ada", "bea"].enumerated().map { index, name in
            let minted = try Command.run([binary, "token", "--secret-file", secret, "--room", "traced", "--identity", name,
                                          "--relay", "127.0.0.1:\(relayPort)"])
            return try TestCaller(name: name, invite: try #require(minted.invite), ssrc: UInt32(index + 1))
        }
        callers.forEach { $0.start() }
        #expect(pumpAll(callers, timeout: 10) { callers.allSatisfy { $0.isActive && $0.link.roster.count == 2 } })
        for sequence in 0..<50 {
            callers[sequence % 2].send(opusFrame: [0x78] + [UInt8](repeating: UInt8(sequence), count: 60))
            pumpAll(callers, timeout: 0.02) { false }
        }
        #expect(callers[1].arrivals.count >= 20, "media flowed through the traced relay")
        // The relay, not strace, gets the SIGTERM (as from systemd); strace ends with it.
        let relay = try #require(childProcess(of: pid), "strace started no relay")
        kill(relay, SIGTERM)
        var status: Int32 = 0
        let deadline = monotonicSeconds() + 10
        while waitpid(pid, &status, WNOHANG) == 0, monotonicSeconds() < deadline { pumpAll(callers, timeout: 0.01) { false } }
        #expect(status & 0x7F == 0 && (status >> 8) & 0xFF == 0, "the traced relay exited cleanly after SIGTERM")
        reaped = monotonicSeconds() < deadline

        let used = Set(readText(trace).split(separator: "\n").compactMap { line -> String? in
            let fields = line.split(separator: " ")
            guard let first = fields.first, Double(first) != nil, let name = fields.last, name != "total" else { return nil }
            return String(name)
        })
        let refused = used.subtracting(allowed).sorted()
        print("the relay made \(used.count) kinds of system call: \(used.sorted().joined(separator: " "))")
        print("outside the unit's SystemCallFilter: \(refused.isEmpty ? "none" : refused.joined(separator: " "))")
        #expect(used.count > 20, "strace saw the relay: \(readText(trace).prefix(300))")
        #expect(refused.isEmpty, "these would fail with EPERM under the unit: \(refused)")
    }

    /// The system calls the unit's SystemCallFilter lines leave allowed, as systemd computes
    /// them: the allow-list (plus @default, always allowed), minus each `~` line's groups,
    /// with every group expanded from `systemd-analyze syscall-filter`.
    static func allowedSystemCalls(analyze: String, unit: String) throws -> Set<String> {
        let listing = try Command.run([analyze, "syscall-filter"])
        try listing.expectSuccess()
        var groups: [String: [String]] = [:]
        var current: String?
        for line in listing.output.split(separator: "\n") {
            let text = line.trimmed(" ")
            if text.hasPrefix("#") || text.isEmpty { continue }
            if line.hasPrefix("@") { current = text; groups[text] = []; continue }
            if let current { groups[current, default: []].append(text) }
        }
        func expand(_ name: String, _ seen: inout Set<String>) -> Set<String> {
            guard name.hasPrefix("@") else { return [name] }
            guard seen.insert(name).inserted else { return [] }
            return (groups[name] ?? []).reduce(into: Set<String>()) { $0.formUnion(expand($1, &seen)) }
        }
        var seen = Set<String>()
        var allowed = expand("@default", &seen)
        for line in unit.split(separator: "\n") where line.hasPrefix("SystemCallFilter=") {
            let value = line.dropFirst("SystemCallFilter=".count)
            let denying = value.hasPrefix("~")
            for name in value.drop { $0 == "~" }.split(separator: " ") {
                var seen = Set<String>()
                let calls = expand(String(name), &seen)
                if denying { allowed.subtract(calls) } else { allowed.formUnion(calls) }
            }
        }
        return allowed
    }
}

/// The first process whose parent is `parent`, from /proc.
func childProcess(of parent: pid_t) -> pid_t? {
    guard let folder = opendir("/proc") else { return nil }
    defer { closedir(folder) }
    while let entry = readdir(folder) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        guard let pid = pid_t(name) else { continue }
        // /proc/PID/stat: "pid (command) state ppid ..."; the command may hold spaces, so read after ')'.
        let stat = readText("/proc/\(pid)/stat")
        guard let close = stat.lastIndex(of: ")") else { continue }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        if fields.count > 1, pid_t(fields[1]) == parent { return pid }
    }
    return nil
}

extension Substring {
    func trimmed(_ character: Character) -> String {
        String(drop { $0 == character }.reversed().drop { $0 == character }.reversed())
    }
}
