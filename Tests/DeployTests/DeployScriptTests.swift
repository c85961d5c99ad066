import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The files in Deploy/ checked by the tools that know their formats: shellcheck for the
/// scripts, systemd-analyze for the unit; and the install script's refusals.
@Suite("Deploy: scripts, unit and container")
struct DeployScriptTests {
    /// systemd-analyze's exposure score runs from 0 (locked down) to 10 (unrestricted); under
    /// 2 it calls a service "OK". A typical unhardened service scores 9.6.
    static let maximumExposure = 2.0

    @Test func everyScriptInDeployPassesShellcheck() throws {
        guard let shellcheck = Command.find("shellcheck") else {
            Issue.record("shellcheck is not installed; Scripts/bootstrap installs it")
            return
        }
        let scripts = try deployFiles().filter { $0.hasSuffix(".sh") }
        #expect(scripts.count >= 6, "install, uninstall, common, build-relay, deploy, docker-entrypoint: \(scripts)")
        // -x follows `source common.sh`; the default severity (style) is kept on purpose.
        let result = try Command.run([shellcheck, "-x"] + scripts.map { Repository.deploy + "/" + $0 })
        print("shellcheck -x on \(scripts.sorted().joined(separator: ", ")): exit \(result.status)")
        #expect(result.succeeded, "\(result.output)\(result.errors)")
    }

    @Test func systemdAcceptsTheInstalledUnitAndRatesItsHardeningOK() throws {
        guard let analyze = Command.find("systemd-analyze") else {
            Issue.record("systemd-analyze is not installed; Scripts/bootstrap installs systemd")
            return
        }
        let root = try TemporaryRoot()
        let port = freePort(type: Int32(SOCK_DGRAM.rawValue))
        try Repository.runScript("install.sh", [
            "--root", root.path, "--binary", try Repository.builtRelay(), "--port", "\(port)", "--public-host", "127.0.0.1", "--firewall", "none",
        ]).expectSuccess()
        let unitPath = root.at("/etc/systemd/system/parley-relay.service")
        let unit = readText(unitPath)
        #expect(unit == readText(Repository.deploy + "/parley-relay.service"), "the installed unit is Deploy/parley-relay.service")

        // verify checks ExecStart's binary exists on this system; the only change to the unit
        // is that path, moved to where the binary was installed.
        let verifiable = root.path + "/parley-relay.service"
        try writeText(unit.replacing("ExecStart=/usr/local/bin/", with: "ExecStart=\(root.at("/usr/local/bin/"))"), to: verifiable)
        let verify = try Command.run([analyze, "verify", verifiable])
        print("systemd-analyze verify: exit \(verify.status) \(verify.errors)")
        #expect(verify.succeeded && verify.errors.isEmpty, "\(verify.errors)")

        let security = try Command.run([analyze, "security", "--offline=true", "--root=\(root.path)", "/etc/systemd/system/parley-relay.service"])
        let summary = security.output.split(separator: "\n").last { $0.contains("Overall exposure level") }.map(String.init) ?? ""
        print("systemd-analyze security: \(summary)")
        let exposure = summary.split(separator: ":").last?.split(separator: " ").first.flatMap { Double($0) }
        #expect(exposure.map { $0 <= Self.maximumExposure } == true, "exposure \(summary) \(security.errors)")

        // The directives the deployment promises, each present as written.
        for directive in [
            "User=parley", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=yes",
            "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "CapabilityBoundingSet=", "SystemCallFilter=@system-service",
            "MemoryDenyWriteExecute=yes", "Restart=on-failure", "After=network-online.target", "Wants=network-online.target", "LimitNOFILE=",
            "MemoryMax=", "TasksMax=",
        ] {
            #expect(unit.split(separator: "\n").contains { $0.hasPrefix(directive) }, "the unit has \(directive)")
        }
    }

    @Test func aPortBelow1024GetsExactlyTheOneCapabilityItNeeds() throws {
        let root = try TemporaryRoot()
        let binary = try Repository.builtRelay()
        let dropIn = root.at("/etc/systemd/system/parley-relay.service.d/low-port.conf")
        try Repository.runScript("install.sh", ["--root", root.path, "--binary", binary, "--port", "443", "--public-host", "127.0.0.1", "--firewall", "none"])
            .expectSuccess()
        #expect(readText(dropIn).contains("AmbientCapabilities=CAP_NET_BIND_SERVICE"))
        #expect(readText(root.at("/etc/parley/relay.conf")).contains("listen = 0.0.0.0:443\n"))
        try Repository.runScript("install.sh", ["--root", root.path, "--binary", binary, "--port", "7800", "--public-host", "127.0.0.1", "--firewall", "none"])
            .expectSuccess()
        #expect(!fileExists(dropIn), "moving back above 1024 takes the capability away")
        #expect(readText(root.at("/etc/parley/relay.conf")).contains("listen = 0.0.0.0:7800\n"))
    }

    /// A second relay of a cluster: relay.conf names the store, the address other relays send
    /// clients to and the region; the secret takes the first relay's token secret and keeps a
    /// key of its own, so one token works on both while each invite pins its own relay.
    @Test func aClusterMemberIsConfiguredWithTheSharedTokenSecretAndAKeyOfItsOwn() throws {
        let root = try TemporaryRoot()
        let workspace = try TemporaryRoot()
        let binary = try Repository.builtRelay()
        let first = workspace.at("/first.secret")
        try Command.run([binary, "keygen", "--out", first]).expectSuccess()
        try Repository.runScript("install.sh", [
            "--root", root.path, "--binary", binary, "--public-host", "198.51.100.8", "--firewall", "none",
            "--cluster", "http://10.0.0.2:2379", "--region", "eu-west", "--token-secret-from", first,
        ]).expectSuccess()
        let config = readText(root.at("/etc/parley/relay.conf"))
        for line in ["cluster = http://10.0.0.2:2379\n", "public-address = 198.51.100.8:7800\n", "region = eu-west\n"] {
            #expect(config.contains(line), "relay.conf has \(line)")
        }
        func line(_ key: String, of path: String) -> String? {
            readText(path).split(separator: "\n").first { $0.hasPrefix(key + " ") || $0.hasPrefix(key + "=") }.map(String.init)
        }
        let installed = root.at("/etc/parley/relay.secret")
        #expect(line("token-secret", of: installed) != nil && line("token-secret", of: installed) == line("token-secret", of: first))
        #expect(line("relay-private-key", of: installed) != nil && line("relay-private-key", of: installed) != line("relay-private-key", of: first))
        // The installed relay accepts the secret and the configuration as they are.
        try Command.run([binary, "token", "--secret-file", installed, "--room", "r", "--identity", "a", "--relay", "127.0.0.1:1"]).expectSuccess()
    }

    /// A member whose store is reached over TLS: the CA, the client certificate and key, and
    /// the etcd user's password are copied under /etc/parley/cluster/ (key and password readable
    /// by the relay's user only) and relay.conf names them where the relay's sandbox reads them.
    @Test func aClusterMemberOfAStoreBehindTLSGetsItsCertificatesAndPasswordInstalled() throws {
        let root = try TemporaryRoot()
        let workspace = try TemporaryRoot()
        let binary = try Repository.builtRelay()
        var given: [String: String] = [:]
        for (flag, name, text) in [
            ("--cluster-ca", "ca.pem", "CA"), ("--cluster-cert", "relay.pem", "CERT"), ("--cluster-key", "relay.key", "KEY"),
            ("--cluster-password-file", "password", "secret-password"),
        ] {
            given[flag] = workspace.at("/" + name)
            try writeText(text, to: workspace.at("/" + name))
        }
        try Repository.runScript("install.sh", [
            "--root", root.path, "--binary", binary, "--public-host", "198.51.100.8", "--firewall", "none",
            "--cluster", "https://10.0.0.2:2379", "--cluster-user", "parley",
        ] + given.flatMap { [$0.key, $0.value] }).expectSuccess()
        let config = readText(root.at("/etc/parley/relay.conf"))
        for line in [
            "cluster = https://10.0.0.2:2379\n", "cluster-user = parley\n", "cluster-ca = /etc/parley/cluster/ca.pem\n",
            "cluster-cert = /etc/parley/cluster/client.pem\n", "cluster-key = /etc/parley/cluster/client.key\n",
            "cluster-password-file = /etc/parley/cluster/password\n",
        ] {
            #expect(config.contains(line), "relay.conf has \(line)")
        }
        #expect(readText(root.at("/etc/parley/cluster/password")) == "secret-password")
        for (name, mode) in [("ca.pem", 0o640), ("client.pem", 0o640), ("client.key", 0o600), ("password", 0o600)] as [(String, mode_t)] {
            var info = stat()
            #expect(stat(root.at("/etc/parley/cluster/" + name), &info) == 0 && info.st_mode & 0o777 == mode, "\(name)")
        }
    }

    @Test func installRefusesBadOptionsWithAMessageAndChangesNothing() throws {
        let root = try TemporaryRoot()
        let binary = try Repository.builtRelay()
        let cases: [([String], String)] = [
            (["--port", "99999"], "--port is '99999'"),
            (["--port", "seven"], "--port is 'seven'"),
            (["--admin", "everywhere"], "--admin is 'everywhere'"),
            (["--firewall", "iptables"], "--firewall is 'iptables'"),
            (["--public-host", "relay.example.org:7800"], "without a port"),
            (["--binary", "/nonexistent/parley-relay"], "does not exist"),
            (["--root", "/nonexistent/root"], "is not a folder"),
            (["--colour"], "unknown option '--colour'"),
            (["--cluster", "etcd://10.0.0.2:2379", "--public-host", "198.51.100.8"], "--cluster is 'etcd://10.0.0.2:2379'"),
            (["--cluster", "http://10.0.0.2:2379", "--public-host", "198.51.100.8", "--cluster-user", "parley", "--cluster-password-file", "/etc/hostname"],
             "a password never goes over plain http://"),
            (["--cluster", "https://10.0.0.2:2379", "--public-host", "198.51.100.8", "--cluster-cert", "/etc/hostname"], "--cluster-cert and --cluster-key go together"),
            (["--cluster", "https://10.0.0.2:2379", "--public-host", "198.51.100.8", "--cluster-ca", "/nonexistent/ca.pem"], "--cluster-ca /nonexistent/ca.pem cannot be read"),
            (["--cluster-user", "parley"], "add --cluster URL"),
            (["--cluster", "http://10.0.0.2:2379"], "--cluster needs --public-host"),
            (["--region", "eu-west"], "add --cluster URL"),
            (["--cluster", "http://10.0.0.2:2379", "--public-host", "relay.example.org"], "with --cluster give this machine's public IP address"),
            (["--cluster", "http://10.0.0.2:2379", "--public-host", "198.51.100.8", "--region", "eu west"], "--region is 'eu west'"),
            (["--cluster", "http://10.0.0.2:2379", "--public-host", "198.51.100.8", "--token-secret-from", "/nonexistent"], "cannot be read"),
        ]
        for (arguments, expected) in cases {
            let options = arguments.contains("--root") ? arguments + ["--binary", binary] : ["--root", root.path, "--binary", binary] + arguments
            let result = try Command.run(["bash", Repository.deploy + "/install.sh"] + options)
            print("install.sh \(arguments.joined(separator: " ")) → \(result.status): \(result.errors.split(separator: "\n").first ?? "")")
            #expect(result.status == 2, "\(arguments)")
            #expect(result.errors.contains(expected), "\(arguments): \(result.errors)")
        }
        #expect(root.snapshot().keys.sorted() == ["/"], "nothing was written")
    }

    @Test func theContainerEntryPointMakesTheSecretOnceServesAndAnswersTheHealthCheck() throws {
        let folder = try TemporaryRoot()
        let secret = folder.path + "/relay.secret"
        let adminPort = freePort(type: Int32(SOCK_STREAM.rawValue))
        let binaryFolder = String(try Repository.builtRelay().dropLast("/parley-relay".count))
        let environment = [
            "PATH": binaryFolder + ":" + (currentEnvironment()["PATH"] ?? "/usr/bin:/bin"),
            "PARLEY_RELAY_SECRET_FILE": secret,
            "PARLEY_RELAY_LISTEN": "127.0.0.1:\(freePort(type: Int32(SOCK_DGRAM.rawValue)))",
            "PARLEY_RELAY_ADMIN": "127.0.0.1:\(adminPort)",
        ]
        let entryPoint = Repository.deploy + "/docker-entrypoint.sh"
        let log = folder.path + "/log"
        let pid = try Command.spawn(["bash", entryPoint, "serve"], environment: environment, standardOutput: log, standardError: log + ".err")
        defer { kill(pid, SIGKILL); var status: Int32 = 0; waitpid(pid, &status, 0) }
        var healthy = false
        for _ in 0..<200 where !healthy {
            healthy = (try? Command.run(["bash", entryPoint, "healthcheck"], environment: environment, timeout: 5))?.succeeded == true
            if !healthy { usleep(50_000) }
        }
        #expect(healthy, "the HEALTHCHECK command sees /healthz: \(readText(log + ".err"))")
        let made = readBytes(secret)
        #expect(made != nil, "the first start made the secret in the volume")
        var info = stat()
        #expect(stat(secret, &info) == 0 && info.st_mode & 0o777 == 0o600)
        kill(pid, SIGTERM)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        #expect(status & 0x7F == 0 && (status >> 8) & 0xFF == 0, "docker stop's SIGTERM ends it cleanly")

        // A second start (the container recreated, the volume kept) uses the same secret.
        let second = try Command.spawn(["bash", entryPoint, "serve"], environment: environment, standardOutput: log, standardError: log + ".err")
        defer { kill(second, SIGKILL); var status: Int32 = 0; waitpid(second, &status, 0) }
        usleep(300_000)
        #expect(readBytes(secret) == made, "the secret is never replaced")
        let unhealthy = try Command.run(["bash", entryPoint, "healthcheck"], environment: ["PARLEY_RELAY_ADMIN": "127.0.0.1:\(freePort(type: Int32(SOCK_STREAM.rawValue)))"], timeout: 5)
        #expect(!unhealthy.succeeded, "the health check fails when nothing answers")
    }

    @Test func theDockerfileCopiesOnlyWhatExistsAndRunsAsTheServiceUser() throws {
        // No Docker engine runs here, so `docker build` cannot; this checks what can be checked
        // without one: every COPY source exists and is not ignored, and the runtime is not root.
        let dockerfile = readText(Repository.deploy + "/Dockerfile")
        let ignored = readText(Repository.deploy + "/Dockerfile.dockerignore").split(separator: "\n")
            .filter { !$0.hasPrefix("#") && !$0.isEmpty }.map(String.init)
        let instructions = dockerfile.split(separator: "\n").filter { !$0.hasPrefix("#") && !$0.hasPrefix(" ") }
        for copy in instructions where copy.hasPrefix("COPY ") && !copy.contains("--from=") {
            let words = copy.split(separator: " ").dropFirst().map(String.init)
            for source in words.dropLast() where source != "." {
                #expect(fileExists(Repository.root + "/" + source), "\(copy): \(source) exists")
                #expect(!ignored.contains { source == $0 || source.hasPrefix($0 + "/") }, "\(copy): \(source) is not ignored")
            }
        }
        let stages = instructions.filter { $0.hasPrefix("FROM ") }
        #expect(stages.count == 2, "multi-stage: build, then a slim runtime")
        let runtime = dockerfile[dockerfile.range(of: stages.last!)!.upperBound...]
        #expect(runtime.contains("\nUSER parley\n") && runtime.contains("VOLUME [\"/etc/parley\"]") && runtime.contains("EXPOSE 7800/udp"))
    }

    func deployFiles() throws -> [String] {
        guard let folder = opendir(Repository.deploy) else { throw TestFailure("cannot list \(Repository.deploy)") }
        defer { closedir(folder) }
        var names: [String] = []
        while let entry = readdir(folder) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if !name.hasPrefix(".") { names.append(name) }
        }
        return names
    }
}
