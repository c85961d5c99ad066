import ParleyBasics

#if canImport(Glibc)
import Glibc
#endif

/// A program run to completion, its output kept: the deploy scripts as a person runs them.
struct CommandResult {
    let status: Int32
    let output: String
    let errors: String

    var succeeded: Bool { status == 0 }
    /// Both streams, for a failure message.
    var transcript: String { "exit \(status)\n--- stdout\n\(output)--- stderr\n\(errors)" }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

enum Command {
    /// Runs `arguments` (looked up on PATH) and waits, killing it after `timeout` seconds.
    /// Output goes through files, so a chatty program never blocks on a full pipe.
    static func run(_ arguments: [String], environment: [String: String] = [:], timeout: Double = 120) throws -> CommandResult {
        let outputPath = temporaryPath("out"), errorsPath = temporaryPath("err")
        defer { unlink(outputPath); unlink(errorsPath) }
        let pid = try spawn(arguments, environment: environment, standardOutput: outputPath, standardError: errorsPath)
        let deadline = monotonicSeconds() + timeout
        var status: Int32 = 0
        while waitpid(pid, &status, WNOHANG) == 0 {
            if monotonicSeconds() > deadline {
                kill(pid, SIGKILL)
                waitpid(pid, &status, 0)
                throw TestFailure("\(arguments.joined(separator: " ")) did not finish within \(Int(timeout)) s")
            }
            usleep(10_000)
        }
        let code = status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
        return CommandResult(status: code, output: readText(outputPath), errors: readText(errorsPath))
    }

    /// Starts `arguments` without waiting; output goes to the given files.
    static func spawn(_ arguments: [String], environment: [String: String] = [:], standardOutput: String, standardError: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, standardOutput, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, standardError, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        var merged = currentEnvironment()
        for (key, value) in environment { merged[key] = value }
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { argv.forEach { free($0) }; envp.forEach { free($0) } }
        var pid: pid_t = 0
        let result = posix_spawnp(&pid, arguments[0], &actions, nil, argv, envp)
        guard result == 0 else {
            throw TestFailure("cannot start \(arguments[0]): \(String(cString: strerror(result)))")
        }
        return pid
    }

    /// The full path of `program` on PATH, or nil.
    static func find(_ program: String) -> String? {
        let path = currentEnvironment()["PATH"] ?? "/usr/bin:/bin"
        for folder in path.split(separator: ":") where access("\(folder)/\(program)", X_OK) == 0 {
            return "\(folder)/\(program)"
        }
        return nil
    }
}

func currentEnvironment() -> [String: String] {
    var result: [String: String] = [:]
    var pointer = environ
    while let entry = pointer.pointee {
        let text = String(cString: entry)
        if let equals = text.firstIndex(of: "=") {
            result[String(text[..<equals])] = String(text[text.index(after: equals)...])
        }
        pointer += 1
    }
    return result
}

func temporaryPath(_ suffix: String) -> String {
    "/tmp/parley-deploy-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).\(suffix)"
}

/// The process's monotonic clock (``MonotonicClock``) in seconds.
func monotonicSeconds() -> Double { Double(MonotonicClock.now()) / 1e9 }

/// A whole file as bytes, or nil when it cannot be read.
func readBytes(_ path: String) -> [UInt8]? {
    guard let file = fopen(path, "rb") else { return nil }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65_536)
    while true {
        let count = fread(&chunk, 1, chunk.count, file)
        if count == 0 { break }
        bytes += chunk[..<count]
    }
    return bytes
}

func readText(_ path: String) -> String {
    String(decoding: readBytes(path) ?? [], as: UTF8.self)
}

func writeBytes(_ bytes: [UInt8], to path: String) throws {
    guard let file = fopen(path, "wb") else { throw TestFailure("cannot write \(path): \(String(cString: strerror(errno)))") }
    defer { fclose(file) }
    guard fwrite(bytes, 1, bytes.count, file) == bytes.count else { throw TestFailure("cannot write \(path)") }
}

func writeText(_ text: String, to path: String) throws {
    try writeBytes(Array(text.utf8), to: path)
}

func fileExists(_ path: String) -> Bool { access(path, F_OK) == 0 }
