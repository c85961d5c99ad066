import ArgumentParser
import CParleyNet
import ParleyBasics

#if canImport(Glibc)
import Glibc
#endif

/// The process's monotonic clock (``MonotonicClock``) in seconds.
func monotonic() -> Double { Double(MonotonicClock.now()) / 1e9 }

/// CLOCK_REALTIME, the clock of the kernel's receive timestamps the relay benchmark measures against.
func realtimeNanoseconds() -> UInt64 { WallClock.nanoseconds() }

func pin(cpu: Int) {
    _ = parley_pin_current_thread(Int32(cpu))
}

/// The kernel's id of the calling thread, from /proc/thread-self (a link to PID/task/TID).
func currentThreadID() -> pid_t {
    var buffer = [CChar](repeating: 0, count: 256)
    let count = readlink("/proc/thread-self", &buffer, buffer.count - 1)
    guard count > 0 else { return 0 }
    let text = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return pid_t(text.split(separator: "/").last.flatMap { Int32($0) } ?? 0)
}

func raiseFileLimit() {
    var limit = rlimit()
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    limit.rlim_cur = limit.rlim_max
    setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
}

func loopbackAddress(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = port.bigEndian
    return address
}

/// Binds to 127.0.0.1 on an ephemeral port; returns the port.
func bindLoopback(_ descriptor: Int32) -> UInt16 {
    var address = loopbackAddress(port: 0)
    _ = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
    }
    return UInt16(bigEndian: address.sin_port)
}

func freeTCPPort() -> UInt16 {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(descriptor) }
    return bindLoopback(descriptor)
}

func freeUDPPort() -> UInt16 {
    let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
    defer { close(descriptor) }
    return bindLoopback(descriptor)
}

/// Jiffies of one CPU from /proc/stat: busy (all but idle and iowait), softirq, total.
func coreTimes(cpu: Int) -> (busy: Double, softirq: Double, total: Double) {
    guard let file = fopen("/proc/stat", "r") else { return (0, 0, 0) }
    defer { fclose(file) }
    var buffer = [CChar](repeating: 0, count: 512)
    while fgets(&buffer, 512, file) != nil {
        let line = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.first == "cpu\(cpu)" else { continue }
        let values = fields.dropFirst().compactMap { Double($0.filter { $0.isNumber }) }
        guard values.count >= 7 else { return (0, 0, 0) }
        let total = values.prefix(8).reduce(0, +)
        return (total - values[3] - values[4], values[6], total)
    }
    return (0, 0, 0)
}

/// utime + stime of a /proc stat file, in seconds.
func processCPUSeconds(path: String) -> Double {
    guard let file = fopen(path, "r") else { return 0 }
    defer { fclose(file) }
    var buffer = [CChar](repeating: 0, count: 1024)
    guard fgets(&buffer, 1024, file) != nil else { return 0 }
    let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    // Fields after the command name, which is in parentheses and may contain spaces.
    guard let close = text.lastIndex(of: ")") else { return 0 }
    let fields = text[text.index(after: close)...].split(separator: " ")
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// Starts `arguments` (the program looked up on PATH); with `discardingOutput` its standard
/// output goes to /dev/null.
func spawnProcess(_ arguments: [String], discardingOutput: Bool = false) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    if discardingOutput { posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0) }
    let argv = arguments.map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    var child: pid_t = 0
    guard posix_spawnp(&child, arguments[0], &actions, nil, argv, environ) == 0 else {
        throw ValidationError("cannot start \(arguments[0])")
    }
    return child
}

/// SIGTERM, as an operator would (so a profiler wrapping the process writes its data), then
/// SIGKILL if it has not exited within `seconds`.
func stopProcess(_ pid: pid_t, within seconds: Double = 5) {
    kill(pid, SIGTERM)
    var status: Int32 = 0
    let deadline = monotonic() + seconds
    while waitpid(pid, &status, WNOHANG) == 0 {
        if monotonic() > deadline {
            kill(pid, SIGKILL)
            waitpid(pid, &status, 0)
            return
        }
        usleep(10_000)
    }
}
