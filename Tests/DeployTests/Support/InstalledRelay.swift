#if canImport(Glibc)
import Glibc
#endif

/// The installed relay started as systemd would start the unit: the unit's `ExecStart`
/// command line (its paths moved under the temporary root), as the service user from the
/// root's /etc/passwd, with no new privileges and, where the kernel offers it
/// (PR_SET_MDWE, Linux 6.3), memory that is never writable and executable at once — the
/// kernel's own form of the unit's MemoryDenyWriteExecute.
final class InstalledRelay {
    let pid: pid_t
    let commandLine: [String]
    let logPath: String
    /// Whether the relay runs under the kernel's write-xor-execute rule.
    let memoryDenyWriteExecute: Bool

    init(unitFile: String, root: TemporaryRoot, secretFile: String) throws {
        let unit = readText(unitFile)
        guard let line = unit.split(separator: "\n").first(where: { $0.hasPrefix("ExecStart=") }) else {
            throw TestFailure("\(unitFile) has no ExecStart line")
        }
        // The unit's command line, word for word, with each absolute path under the root.
        commandLine = line.dropFirst("ExecStart=".count).split(separator: " ").map { word in
            word.hasPrefix("/") ? root.at(String(word)) : String(word)
        }
        var prefix: [String] = []
        if getuid() == 0 {
            guard let ids = root.passwdEntries(named: "parley").first, ids.count >= 4 else {
                throw TestFailure("install.sh made no parley user in \(root.at("/etc/passwd"))")
            }
            prefix = ["setpriv", "--reuid=\(ids[2])", "--regid=\(ids[3])", "--clear-groups", "--no-new-privs", "--"]
        } else {
            prefix = ["setpriv", "--no-new-privs", "--"]
        }
        memoryDenyWriteExecute = Self.kernelHasMemoryDenyWriteExecute()
        if memoryDenyWriteExecute, let python = Command.find("python3") {
            // Set before setpriv so it covers everything exec'd after it (the flag survives execve).
            let wrapper = "import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True); "
                + "sys.exit('PR_SET_MDWE failed') if libc.prctl(65, 1, 0, 0, 0) != 0 else os.execvp(sys.argv[1], sys.argv[1:])"
            prefix = [python, "-c", wrapper] + prefix
        }
        logPath = temporaryPath("relay.log")
        pid = try Command.spawn(prefix + commandLine, environment: [
            // The config names the live secret path; under the root it is this one.
            "PARLEY_RELAY_SECRET_FILE": secretFile,
        ], standardOutput: logPath, standardError: logPath + ".err")
    }

    /// Set once the process is reaped, so its id (which the system may reuse) is never signalled again.
    private var exited = false

    deinit {
        if !exited {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
        unlink(logPath)
        unlink(logPath + ".err")
    }

    var log: String { readText(logPath + ".err") + readText(logPath) }

    /// Polls /healthz until it answers 200 or `timeout` passes; returns the seconds it took.
    func waitUntilHealthy(adminPort: UInt16, timeout: Double = 20) -> Double? {
        let start = monotonicSeconds()
        while monotonicSeconds() - start < timeout {
            if let (status, _) = try? httpGet(port: adminPort, path: "/healthz"), status == 200 {
                return monotonicSeconds() - start
            }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid { exited = true; return nil }
            usleep(50_000)
        }
        return nil
    }

    /// SIGTERM, as `systemctl stop` sends; `whileWaiting` runs until the process exits (the
    /// members answer the relay's goodbyes). Returns the exit status and the seconds it took.
    func terminate(timeout: Double = 10, whileWaiting: () -> Void = {}) -> (status: Int32, seconds: Double)? {
        let start = monotonicSeconds()
        kill(pid, SIGTERM)
        var status: Int32 = 0
        while waitpid(pid, &status, WNOHANG) == 0 {
            if monotonicSeconds() - start > timeout { return nil }
            whileWaiting()
            usleep(1_000)
        }
        exited = true
        let code = status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
        return (code, monotonicSeconds() - start)
    }

    /// Whether prctl(PR_SET_MDWE) works here, tried in a child so this process stays as it is.
    static func kernelHasMemoryDenyWriteExecute() -> Bool {
        guard let python = Command.find("python3"),
              let result = try? Command.run([python, "-c", "import ctypes, sys; sys.exit(0 if ctypes.CDLL(None).prctl(65, 1, 0, 0, 0) == 0 else 1)"]) else {
            return false
        }
        return result.succeeded
    }
}

/// One HTTP/1.0 GET on 127.0.0.1; returns the status and the body.
func httpGet(port: UInt16, path: String) throws -> (Int, String) {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { throw TestFailure("socket failed") }
    defer { close(descriptor) }
    var timeout = timeval(tv_sec: 2, tv_usec: 0)
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var address = loopback(port: port)
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else { throw TestFailure("nothing listens on 127.0.0.1:\(port)") }
    let request = Array("GET \(path) HTTP/1.0\r\nHost: localhost\r\n\r\n".utf8)
    _ = request.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, 0) }
    var response: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16_384)
    while true {
        let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        if count <= 0 { break }
        response += chunk[..<count]
    }
    let text = String(decoding: response, as: UTF8.self)
    guard let statusText = text.split(separator: " ").dropFirst().first, let status = Int(statusText) else {
        throw TestFailure("not an HTTP response: \(text.prefix(80))")
    }
    let body = text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...]) } ?? ""
    return (status, body)
}

func loopback(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return address
}

/// A UDP or TCP port nothing listens on right now (bound, read, closed).
func freePort(type: Int32) -> UInt16 {
    let descriptor = socket(AF_INET, type, 0)
    defer { close(descriptor) }
    var address = loopback(port: 0)
    _ = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
    }
    return UInt16(bigEndian: address.sin_port)
}
