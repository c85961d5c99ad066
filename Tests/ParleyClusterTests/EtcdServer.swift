import Foundation
import NIOPosix
import ParleyRelay
import Testing

/// A real etcd (Debian's `etcd-server`) on 127.0.0.1, in a folder of its own, for one test.
///
/// Its ports are found free before it starts; its lease checks run at etcd's defaults, so a
/// relay's 2 s lease expires as it would in production. `kill()` is SIGKILL (the store
/// vanishing) and `start()` again brings it back on the same ports with the same data.
final class EtcdServer: @unchecked Sendable {
    // @unchecked: `process` is replaced only by start/kill, which one test calls in turn.
    let directory: String
    let clientPort: Int
    let peerPort: Int
    private var process: Process?

    static let executable = "/usr/bin/etcd"

    var endpoint: EtcdEndpoint { EtcdEndpoint(host: "127.0.0.1", port: clientPort) }
    var url: String { "http://127.0.0.1:\(clientPort)" }

    init() throws {
        guard FileManager.default.isExecutableFile(atPath: Self.executable) else {
            throw Missing(description: "etcd is not installed (\(Self.executable)); run Scripts/bootstrap, which installs etcd-server")
        }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-etcd-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        clientPort = try freeTCPPort()
        peerPort = try freeTCPPort()
        try start()
    }

    struct Missing: Error, CustomStringConvertible { let description: String }

    /// Starts etcd and waits until it answers (a few hundred milliseconds).
    func start() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        let client = "http://127.0.0.1:\(clientPort)", peer = "http://127.0.0.1:\(peerPort)"
        process.arguments = [
            "--name", "parley-test", "--data-dir", directory + "/data",
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", "parley-test=\(peer)",
        ]
        let log = directory + "/etcd.log"
        if !FileManager.default.fileExists(atPath: log) { FileManager.default.createFile(atPath: log, contents: nil) }
        let handle = FileHandle(forWritingAtPath: log)
        handle?.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        self.process = process
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if Self.answers(port: clientPort) { return }
            guard process.isRunning else { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        let said = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        kill()
        throw Missing(description: "etcd did not start on 127.0.0.1:\(clientPort) within 10 s; its log ends: \(said.suffix(600))")
    }

    /// SIGKILL: the store vanishes at once, as when its machine dies.
    func kill() {
        guard let process, process.isRunning else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
    }

    func stop() {
        kill()
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { stop() }

    /// Whether etcd answers its health check on `port`.
    static func answers(port: Int) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return false }
        let request = Array("GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, 0) }
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 512)
        let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        return count > 0 && String(decoding: buffer[..<count], as: UTF8.self).contains("\"health\":\"true\"")
    }
}

/// A TCP port nobody listens on now (the kernel's pick for port 0).
func freeTCPPort() throws -> Int { try freePort(host: "127.0.0.1", type: SOCK_STREAM) }

/// A UDP port free on `host` now.
func freeUDPPort(host: String) throws -> Int { try freePort(host: host, type: SOCK_DGRAM) }

/// A port free now on every one of `hosts` (the relays of a recipe share one port number).
func freePort(on hosts: [String], type: __socket_type) throws -> Int {
    for _ in 0..<50 {
        let port = try freePort(host: hosts[0], type: type)
        if hosts.dropFirst().allSatisfy({ (try? freePort(host: $0, type: type, port: port)) != nil }) { return port }
    }
    throw EtcdServer.Missing(description: "no port is free on all of \(hosts)")
}

private func freePort(host: String, type: __socket_type, port: Int = 0) throws -> Int {
    let descriptor = socket(AF_INET, Int32(type.rawValue), 0)
    defer { close(descriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr(host)
    address.sin_port = UInt16(port).bigEndian
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else { throw EtcdServer.Missing(description: "cannot bind a port on \(host)") }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}
