import Foundation
import NIOPosix
import ParleyCluster
import ParleyRelay
import ParleyRelayTestSupport
import Testing

/// How the test store is reached: as most single-network clusters run it, or as a cluster
/// spanning regions must (TLS both ways, and etcd's users).
enum StoreSecurity: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// Plain HTTP on loopback, no users.
    case plain
    /// TLS with a CA of the test's own, a client certificate (etcd's `--client-cert-auth`),
    /// and etcd's authentication on: the relays log in as `parley`, whose role may read and
    /// write `/parley/` only.
    case tlsAndAuthentication

    var testDescription: String { self == .plain ? "plain HTTP" : "TLS, client certificate and user" }
}

/// A real etcd (Debian's `etcd-server`) on 127.0.0.1, in a folder of its own, for one test.
///
/// Its ports are found free before it starts; its lease checks run at etcd's defaults, so a
/// relay's 2 s lease expires as it would in production. `kill()` is SIGKILL (the store
/// vanishing) and `start()` again brings it back on the same ports with the same data.
///
/// With ``StoreSecurity/tlsAndAuthentication`` it makes a throwaway CA, a server certificate
/// for 127.0.0.1 and a client certificate with Debian's `openssl`, serves TLS only, asks every
/// client for a certificate, and, through Debian's `etcdctl`, makes the users `root` and
/// `parley` (role `parley`: read and write under `/parley/`) and turns authentication on.
final class EtcdServer: @unchecked Sendable {
    // @unchecked: `process` is replaced only by start/kill, which one test calls in turn.
    let directory: String
    let clientPort: Int
    let peerPort: Int
    let security: StoreSecurity
    private var process: Process?
    private var configured = false

    static let executable = "/usr/bin/etcd"
    static let control = "/usr/bin/etcdctl"
    static let user = "parley"

    var endpoint: EtcdEndpoint { EtcdEndpoint(host: "127.0.0.1", port: clientPort, usesTLS: security != .plain) }
    var url: String { endpoint.description }

    /// The files a relay needs to reach this store (none for a plain one).
    var credentials: EtcdCredentials {
        guard security == .tlsAndAuthentication else { return EtcdCredentials() }
        return EtcdCredentials(certificateAuthorityFile: path("ca.pem"), certificateFile: path("client.pem"), keyFile: path("client.key"),
                               user: Self.user, passwordFile: path("password"))
    }

    /// The same as `parley-relay serve` flags.
    var relayFlags: [String] {
        var flags = ["--cluster", url]
        let credentials = self.credentials
        if let file = credentials.certificateAuthorityFile { flags += ["--cluster-ca", file] }
        if let file = credentials.certificateFile { flags += ["--cluster-cert", file] }
        if let file = credentials.keyFile { flags += ["--cluster-key", file] }
        if let user = credentials.user { flags += ["--cluster-user", user] }
        if let file = credentials.passwordFile { flags += ["--cluster-password-file", file] }
        return flags
    }

    /// A client of this store, as a relay of the cluster reaches it.
    func client() throws -> EtcdClient {
        try EtcdClient(endpoint: endpoint, credentials: credentials, group: MultiThreadedEventLoopGroup.singleton)
    }

    /// Makes and starts a store on a thread of its own (``onThread(_:)``): starting one blocks
    /// while etcd comes up and, with TLS, while `openssl` and `etcdctl` run.
    static func started(security: StoreSecurity = .plain) async throws -> EtcdServer {
        try await onThread { try EtcdServer(security: security) }
    }

    /// ``start()`` after a ``kill()``, on a thread of its own.
    func restarted() async throws {
        try await onThread { try self.start() }
    }

    /// ``etcdctl(_:)`` on a thread of its own.
    @discardableResult
    func etcdctlOffThePool(_ arguments: [String]) async throws -> String {
        try await onThread { try self.etcdctl(arguments) }
    }

    init(security: StoreSecurity = .plain) throws {
        for tool in [Self.executable] + (security == .plain ? [] : [Self.control, "/usr/bin/openssl"]) {
            guard FileManager.default.isExecutableFile(atPath: tool) else {
                throw Missing(description: "\(tool) is not installed; run Scripts/bootstrap, which installs etcd-server, etcd-client and openssl")
            }
        }
        self.security = security
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-etcd-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        clientPort = try freeTCPPort()
        peerPort = try freeTCPPort()
        if security == .tlsAndAuthentication { try makeCertificates() }
        try start()
    }

    struct Missing: Error, CustomStringConvertible { let description: String }

    func path(_ name: String) -> String { directory + "/" + name }

    /// Starts etcd and waits until it answers (a few hundred milliseconds); the first time
    /// with TLS, makes its users and turns authentication on.
    func start() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        let peer = "http://127.0.0.1:\(peerPort)"
        process.arguments = [
            "--name", "parley-test", "--data-dir", directory + "/data",
            "--listen-client-urls", url, "--advertise-client-urls", url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", "parley-test=\(peer)",
        ] + (security == .plain ? [] : [
            "--cert-file", path("server.pem"), "--key-file", path("server.key"), "--client-cert-auth", "--trusted-ca-file", path("ca.pem"),
        ])
        let log = path("etcd.log")
        if !FileManager.default.fileExists(atPath: log) { FileManager.default.createFile(atPath: log, contents: nil) }
        let handle = FileHandle(forWritingAtPath: log)
        handle?.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        ChildProcesses.started(process)
        self.process = process
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if answers() { break }
            guard process.isRunning else { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        if process.isRunning, answers() {
            if security == .plain || configured { return }
            if (try? configureAuthentication()) != nil {
                configured = true
                return
            }
        }
        let said = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        kill()
        throw Missing(description: "etcd did not start on \(url) within 10 s; its log ends: \(said.suffix(600))")
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

    /// Whether etcd answers: its health check over plain HTTP, or over TLS through `etcdctl`
    /// once its port takes connections (a Go program started every few milliseconds would
    /// take the CPU from the calls a test measures while the store comes back).
    private func answers() -> Bool {
        guard security == .tlsAndAuthentication else { return Self.answers(port: clientPort) }
        guard Self.accepts(port: clientPort) else { return false }
        return (try? etcdctl(["endpoint", "health"])) != nil
    }

    /// Whether something listens on `port` of 127.0.0.1.
    static func accepts(port: Int) -> Bool { LoopbackTCP(port: port) != nil }

    // MARK: TLS and users

    /// A CA valid for a day, etcd's certificate for 127.0.0.1, and the relays' client
    /// certificate. The client's has no Common Name: etcd's JSON gateway refuses one that has
    /// (it would not be the user) while authentication is on; the user is `parley`'s login.
    private func makeCertificates() throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n".write(toFile: path("server.ext"), atomically: true, encoding: .utf8)
        try "extendedKeyUsage=clientAuth\n".write(toFile: path("client.ext"), atomically: true, encoding: .utf8)
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try openssl(["req", "-x509"] + key + ["-keyout", path("ca.key"), "-out", path("ca.pem"), "-days", "1", "-subj", "/CN=parley-test-ca"])
        for (name, subject) in [("server", "/CN=etcd-test-server"), ("client", "/O=parley-relay")] {
            try openssl(["req"] + key + ["-keyout", path("\(name).key"), "-out", path("\(name).csr"), "-subj", subject])
            try openssl(["x509", "-req", "-in", path("\(name).csr"), "-CA", path("ca.pem"), "-CAkey", path("ca.key"), "-CAcreateserial",
                         "-out", path("\(name).pem"), "-days", "1", "-extfile", path("\(name).ext")])
        }
        try "parley-test-password\n".write(toFile: path("password"), atomically: true, encoding: .utf8)
    }

    private func configureAuthentication() throws {
        for command in [
            ["user", "add", "root:root-test-password"], ["user", "grant-role", "root", "root"],
            ["user", "add", "\(Self.user):parley-test-password"], ["role", "add", Self.user],
            ["role", "grant-permission", Self.user, "--prefix=true", "readwrite", "/parley/"],
            ["user", "grant-role", Self.user, Self.user], ["auth", "enable"],
        ] {
            try etcdctl(command)
        }
    }

    /// Runs `etcdctl` against this store with its client certificate, as root once
    /// authentication is on.
    @discardableResult
    func etcdctl(_ arguments: [String]) throws -> String {
        var flags = ["--endpoints", url, "--cacert", path("ca.pem"), "--cert", path("client.pem"), "--key", path("client.key"), "--dial-timeout", "1s"]
        if configured { flags += ["--user", "root:root-test-password"] }
        return try Self.run(Self.control, flags + arguments)
    }

    private func openssl(_ arguments: [String]) throws {
        try Self.run("/usr/bin/openssl", arguments)
    }

    @discardableResult
    private static func run(_ tool: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw Missing(description: "\(tool) \(arguments.joined(separator: " ")) failed: \(text.suffix(400))")
        }
        return text
    }

    /// Whether etcd answers its health check on `port` (plain HTTP).
    static func answers(port: Int) -> Bool {
        guard let connection = LoopbackTCP(port: port) else { return false }
        let descriptor = connection.descriptor
        connection.send("GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
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
