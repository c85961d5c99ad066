import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `install.sh --web-domain`: the browser page over HTTPS, by Debian's Caddy in front of the
/// relay's web port on 127.0.0.1. What it writes and takes away again in a temporary root, and
/// the page fetched over TLS through a real Caddy (Debian's, started here on loopback with
/// certificates from its own local CA in place of Let's Encrypt) from the installed relay.
@Suite("Deploy: the browser page over HTTPS")
struct BrowserPageHTTPSTests {
    /// Debian 12's /etc/caddy/Caddyfile as the caddy package ships it (2.6.2-5), comments trimmed.
    static let debianCaddyfile = """
        # The Caddyfile is an easy way to configure your Caddy web server.

        :80 {
        \t# Set this path to your site's directory.
        \troot * /usr/share/caddy

        \t# Enable the static file server.
        \tfile_server
        }

        # Refer to the Caddy docs for more information:
        # https://caddyserver.com/docs/caddyfile

        """

    static let importLine = "import /etc/caddy/parley-relay.caddy  # parley-relay: added by Deploy/install.sh\n"

    /// A root with Debian's stock nftables.conf and Caddyfile, as on a fresh VPS with Caddy.
    static func debianRoot() throws -> TemporaryRoot {
        let root = try TemporaryRoot()
        try Command.run(["mkdir", "-p", root.at("/etc/caddy")]).expectSuccess()
        try writeText(InstallLifecycleTests.debianNftablesConf, to: root.at("/etc/nftables.conf"))
        try writeText(Self.debianCaddyfile, to: root.at("/etc/caddy/Caddyfile"))
        return root
    }

    @Test func theWebDomainPutsThePageBehindCaddyOpensHTTPSAndLeavesWithTheRelay() throws {
        let root = try Self.debianRoot()
        let binary = try Repository.builtRelay()
        let options = ["--root", root.path, "--binary", binary, "--public-host", "198.51.100.7", "--firewall", "nftables"]
        let install = try Repository.runScript("install.sh", options + ["--web-domain", "Relay.Example.org"])
        print(install.output)
        try install.expectSuccess()

        let config = readText(root.at("/etc/parley/relay.conf"))
        #expect(config.contains("web = 127.0.0.1:8780\n"), "the web port stays on loopback, behind Caddy: \(config)")
        #expect(config.contains("listen = 198.51.100.7:7800\n"), "the UDP port on the address browsers send their audio to: \(config)")
        let site = readText(root.at("/etc/caddy/parley-relay.caddy"))
        let siteLines = site.split(separator: "\n").map { $0.trimmingPrefix(while: \.isWhitespace) }
        #expect(siteLines.contains("relay.example.org {"), "one site, for the domain in lower case: \(site)")
        #expect(siteLines.contains("reverse_proxy 127.0.0.1:8780 {"))
        #expect(!siteLines.contains { $0.hasPrefix("log") }, "no access log: the page's paths carry its call's secret id")
        #expect(!siteLines.contains { $0.hasPrefix("tls") }, "no --acme-email, no tls line: Caddy's own ACME defaults")
        #expect(readText(root.at("/etc/caddy/Caddyfile")) == Self.debianCaddyfile + Self.importLine, "Debian's Caddyfile with one import at its end")
        let rule = readText(root.at("/etc/nftables.d/parley-relay.nft"))
        #expect(rule.contains("udp dport 7800 accept") && rule.contains("tcp dport { 80, 443 } accept"), "UDP 7800 and TCP 80, 443: \(rule)")
        #expect(rule.components(separatedBy: "accept").count == 3, "and nothing else: \(rule)")

        // The invite for a browser carries the same token as the parley:// one.
        let invite = try #require(install.invite)
        let browserLine = install.output.split(separator: "\n").first { $0.contains("https://relay.example.org/join#token=") }
        #expect(browserLine.map { $0.hasSuffix("#token=" + invite.token) } == true, "\(browserLine ?? "no browser invite")")
        #expect(invite.host == "198.51.100.7" && invite.port == 7800)

        // Again without the option: the page is kept, nothing changes, the link is printed again.
        let installed = root.snapshot()
        let again = try Repository.runScript("install.sh", options)
        try again.expectSuccess()
        InstallLifecycleTests().expectSame(root.snapshot(), installed, "a second install.sh without --web-domain")
        #expect(again.output.contains("https://relay.example.org/join#token="))

        // With an address for the certificate authority, the site asks for it.
        try Repository.runScript("install.sh", options + ["--acme-email", "ops@example.org", "--web-domain", "relay.example.org"]).expectSuccess()
        #expect(readText(root.at("/etc/caddy/parley-relay.caddy")).contains("\ttls ops@example.org\n"))

        // --web-domain off: the page goes, the relay stays.
        let off = try Repository.runScript("install.sh", options + ["--web-domain", "off"])
        print(off.output)
        try off.expectSuccess()
        #expect(!fileExists(root.at("/etc/caddy/parley-relay.caddy")))
        #expect(readText(root.at("/etc/caddy/Caddyfile")) == Self.debianCaddyfile, "the Caddyfile as Debian shipped it")
        #expect(readText(root.at("/etc/parley/relay.conf")).contains("web = off\n"))
        #expect(!readText(root.at("/etc/nftables.d/parley-relay.nft")).contains("tcp"), "TCP 80 and 443 closed again")
        #expect(!off.output.contains("https://"), "no browser invite without the page")

        // On again, then uninstall: nothing of the page is left, Debian's files as they were.
        try Repository.runScript("install.sh", options + ["--web-domain", "relay.example.org"]).expectSuccess()
        let uninstall = try Repository.runScript("uninstall.sh", ["--root", root.path])
        print(uninstall.output)
        try uninstall.expectSuccess()
        #expect(uninstall.output.contains("removed the page's site for relay.example.org"))
        #expect(!fileExists(root.at("/etc/caddy/parley-relay.caddy")))
        #expect(readText(root.at("/etc/caddy/Caddyfile")) == Self.debianCaddyfile)
        #expect(readText(root.at("/etc/nftables.conf")) == InstallLifecycleTests.debianNftablesConf)
        #expect(!fileExists(root.at("/etc/nftables.d/parley-relay.nft")))
    }

    @Test func aWebDomainThatIsNotADNSNameIsRefusedWithAMessageAndChangesNothing() throws {
        let root = try Self.debianRoot()
        let before = root.snapshot()
        let binary = try Repository.builtRelay()
        let cases: [([String], Int32, String)] = [
            (["--web-domain", "198.51.100.7"], 2, "an address; certificates are issued to DNS names"),
            (["--web-domain", "https://relay.example.org/"], 2, "--web-domain is 'https://relay.example.org/'; give the DNS name"),
            (["--web-domain", "relay.example.org:443"], 2, "without https:// or a port"),
            (["--web-domain", "relay"], 2, "--web-domain is 'relay'"),
            (["--web-domain", "-relay.example.org"], 2, "--web-domain is '-relay.example.org'"),
            (["--acme-email", "ops@example.org"], 2, "--acme-email belongs to --web-domain"),
            (["--web-domain", "relay.example.org", "--acme-email", "ops"], 2, "--acme-email is 'ops'; give an e-mail address"),
            // RFC 6761: .invalid never resolves, so the relay could not name its address.
            (["--web-domain", "relay.parley.invalid"], 1, "relay.parley.invalid does not resolve to an address yet"),
        ]
        for (arguments, status, expected) in cases {
            let result = try Command.run(["bash", Repository.deploy + "/install.sh", "--root", root.path, "--binary", binary] + arguments)
            print("install.sh \(arguments.joined(separator: " ")) → \(result.status): \(result.errors.split(separator: "\n").first ?? "")")
            #expect(result.status == status, "\(arguments)")
            #expect(result.errors.contains(expected), "\(arguments): \(result.errors)")
        }
        InstallLifecycleTests().expectSame(root.snapshot(), before, "refused options")
    }

    /// A Caddy that serves the domain already (a site of the owner's own): Caddy refuses the
    /// second site, install.sh says so and what to do, and puts Caddy's files back as they were.
    @Test func aDomainTheOwnersCaddyServesAlreadyIsRefusedAndCaddysFilesArePutBack() throws {
        guard Command.find("caddy") != nil else {
            Issue.record("caddy is not installed; Scripts/bootstrap installs it")
            return
        }
        let root = try Self.debianRoot()
        let owners = Self.debianCaddyfile + "relay.example.org {\n\trespond \"mine\"\n}\n"
        try writeText(owners, to: root.at("/etc/caddy/Caddyfile"))
        let result = try Repository.runScript("install.sh", [
            "--root", root.path, "--binary", try Repository.builtRelay(), "--public-host", "198.51.100.7", "--firewall", "none",
            "--web-domain", "relay.example.org",
        ])
        print(result.errors)
        #expect(result.status == 1)
        #expect(result.errors.contains("Caddy refused its configuration") && result.errors.contains("ambiguous site definition: relay.example.org"))
        #expect(result.errors.contains("add 'reverse_proxy 127.0.0.1:8780' to that site"))
        #expect(readText(root.at("/etc/caddy/Caddyfile")) == owners && !fileExists(root.at("/etc/caddy/parley-relay.caddy")))
    }

    /// The installed relay with `--web` behind Debian's Caddy, the site file exactly as install.sh
    /// wrote it: the page over HTTPS with a certificate curl verifies for the domain, the relay's
    /// own headers passed on, a browser's offer answered through the proxy with the relay's
    /// address in its candidate, http redirected, and nothing of the page's paths in a log.
    @Test func debiansCaddyServesTheInstalledRelaysPageOverHTTPS() throws {
        guard let caddy = Command.find("caddy"), let curl = Command.find("curl") else {
            Issue.record("caddy or curl is not installed; Scripts/bootstrap installs them")
            return
        }
        let root = try Self.debianRoot()
        let workspace = try TemporaryRoot()
        let binary = try Repository.builtRelay()
        let relayPort = freePort(type: Int32(SOCK_DGRAM.rawValue))
        let adminPort = freePort(type: Int32(SOCK_STREAM.rawValue))
        let options = ["--root", root.path, "--binary", binary, "--no-systemd", "--public-host", "127.0.0.1", "--firewall", "none",
                       "--port", "\(relayPort)", "--admin", "127.0.0.1:\(adminPort)"]
        try Repository.runScript("install.sh", options + ["--web-domain", "relay.example.org"]).expectSuccess()
        // A free port for the web port; install.sh keeps a loopback one it finds in relay.conf
        // and points Caddy at it.
        let webPort = freePort(type: Int32(SOCK_STREAM.rawValue))
        let config = root.at("/etc/parley/relay.conf")
        try writeText(readText(config).replacing("web = 127.0.0.1:8780", with: "web = 127.0.0.1:\(webPort)"), to: config)
        try Repository.runScript("install.sh", options).expectSuccess()
        let site = root.at("/etc/caddy/parley-relay.caddy")
        #expect(readText(site).contains("reverse_proxy 127.0.0.1:\(webPort) {"), "Caddy follows the web port in relay.conf")

        // Debian's Caddyfile with the import line install.sh added is one Caddy accepts.
        let environment = ["HOME": workspace.path, "XDG_DATA_HOME": workspace.path + "/data", "XDG_CONFIG_HOME": workspace.path + "/config"]
        let stock = workspace.at("/Caddyfile-as-installed")
        try writeText(readText(root.at("/etc/caddy/Caddyfile")).replacing("import /etc/caddy/", with: "import \(root.at("/etc/caddy/"))"), to: stock)
        let validate = try Command.run([caddy, "validate", "--adapter", "caddyfile", "--config", stock], environment: environment)
        #expect(validate.succeeded, "caddy validate: \(validate.errors.suffix(500))")

        var relay: InstalledRelay? = try InstalledRelay(unitFile: Repository.deploy + "/parley-relay.service", root: root,
                                                        secretFile: root.at("/etc/parley/relay.secret"))
        defer { _ = relay?.terminate() }
        #expect(relay!.waitUntilHealthy(adminPort: adminPort) != nil, "the installed relay is healthy: \(relay!.log)")

        // Caddy as the service runs it, on ports of the test's own, certificates from its local
        // CA (what Let's Encrypt gives on a VPS), importing the site file install.sh wrote.
        let httpPort = freePort(type: Int32(SOCK_STREAM.rawValue)), httpsPort = freePort(type: Int32(SOCK_STREAM.rawValue))
        let storage = workspace.at("/caddy-storage")
        let caddyfile = workspace.at("/Caddyfile")
        try writeText("""
            {
            \thttp_port \(httpPort)
            \thttps_port \(httpsPort)
            \tadmin off
            \tlocal_certs
            \tskip_install_trust
            \tstorage file_system \(storage)
            }
            import \(site)

            """, to: caddyfile)
        let caddyLog = workspace.at("/caddy.log")
        let caddyPID = try Command.spawn([caddy, "run", "--adapter", "caddyfile", "--config", caddyfile], environment: environment,
                                         standardOutput: caddyLog + ".out", standardError: caddyLog)
        defer { kill(caddyPID, SIGTERM); var status: Int32 = 0; waitpid(caddyPID, &status, 0) }

        let domain = "relay.example.org"
        let https = "https://\(domain):\(httpsPort)"
        let trust = ["--resolve", "\(domain):\(httpsPort):127.0.0.1", "--resolve", "\(domain):\(httpPort):127.0.0.1",
                     "--cacert", storage + "/pki/authorities/local/root.crt", "--max-time", "10"]
        func fetch(_ arguments: [String]) throws -> (status: Int, headers: String, body: String) {
            let headers = temporaryPath("headers"), body = temporaryPath("body")
            defer { unlink(headers); unlink(body) }
            let result = try Command.run([curl, "-sS", "-D", headers, "-o", body, "-w", "%{http_code}"] + trust + arguments, timeout: 30)
            return (Int(result.output) ?? 0, readText(headers).lowercased(), readText(body))
        }
        var page = (status: 0, headers: "", body: "")
        let start = monotonicSeconds()
        while monotonicSeconds() - start < 20 {
            page = try fetch(["\(https)/join"])
            if page.status == 200 { break }
            usleep(200_000)
        }
        print("https://\(domain)/join through Caddy: \(page.status), \(page.body.utf8.count) bytes, "
            + "\(Int((monotonicSeconds() - start) * 1000)) ms after Caddy started")
        #expect(page.status == 200, "the page over HTTPS, its certificate verified for \(domain): \(readText(caddyLog).suffix(800))")
        #expect(page.body.contains("<html") && page.body.contains("join"), "the relay's page")
        #expect(page.headers.contains("content-security-policy: default-src 'none'"), "the relay's own headers come through")
        #expect(page.headers.contains("strict-transport-security: max-age="), "Caddy adds HSTS: \(page.headers)")

        // Signalling through the proxy: a bad token is the relay's refusal, a good one an answer
        // whose candidate is the relay's UDP address (bound to one address, as install.sh sets it).
        let offerPath = workspace.at("/offer.sdp")
        try writeText(Self.offer, to: offerPath)
        let refused = try fetch(["-X", "POST", "-H", "Authorization: Bearer not-a-token", "-H", "Content-Type: application/sdp",
                                 "--data-binary", "@" + offerPath, "\(https)/whip"])
        print("POST /whip with a bad token through Caddy: \(refused.status) \(refused.body)")
        #expect(refused.status == 403, "\(refused.body)")
        let minted = try Command.run([root.at("/usr/local/bin/parley-relay"), "token", "--secret-file", root.at("/etc/parley/relay.secret"),
                                      "--room", "lobby", "--identity", "ada"])
        try minted.expectSuccess()
        let token = String(minted.output.split(separator: "\n").first ?? "")
        let answered = try fetch(["-X", "POST", "-H", "Authorization: Bearer \(token)", "-H", "Content-Type: application/sdp",
                                  "--data-binary", "@" + offerPath, "\(https)/whip"])
        let candidate = answered.body.split(whereSeparator: \.isNewline).first { $0.hasPrefix("a=candidate:") }.map(String.init) ?? ""
        print("POST /whip with ada's token through Caddy: \(answered.status), \(candidate)")
        #expect(answered.status == 201, "\(answered.body)")
        #expect(candidate.contains(" 127.0.0.1 \(relayPort) "), "browsers are sent to the relay's own UDP port: \(candidate)")
        #expect(answered.headers.contains("location: /whip/"))

        let plain = try fetch(["http://\(domain):\(httpPort)/join"])
        #expect([301, 302, 307, 308].contains(plain.status) && plain.headers.contains("location: https://\(domain)"),
                "http is redirected to https: \(plain.status) \(plain.headers)")
        #expect(!readText(caddyLog).contains("/whip"), "Caddy logs no request paths")

        _ = relay?.terminate()
        relay = nil
        try Repository.runScript("uninstall.sh", ["--root", root.path, "--no-systemd"]).expectSuccess()
        #expect(!fileExists(site) && readText(root.at("/etc/caddy/Caddyfile")) == Self.debianCaddyfile)
    }

    /// A browser's offer as Chromium writes it (one Opus stream with RED), its certificate's
    /// fingerprint made up: nothing here gets as far as DTLS.
    static let offer = [
        "v=0", "o=- 4611731400430051336 2 IN IP4 127.0.0.1", "s=-", "t=0 0", "a=group:BUNDLE 0",
        "m=audio 9 UDP/TLS/RTP/SAVPF 111 63", "c=IN IP4 0.0.0.0", "a=ice-ufrag:brws", "a=ice-pwd:browserpasswordbrowserpassword",
        "a=fingerprint:sha-256 " + (0..<32).map { _ in "5A" }.joined(separator: ":"), "a=setup:actpass", "a=mid:0",
        "a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level", "a=sendrecv", "a=rtcp-mux", "a=rtpmap:111 opus/48000/2",
        "a=fmtp:111 minptime=10;useinbandfec=1", "a=rtpmap:63 red/48000/2", "a=fmtp:63 111/111", "a=ssrc:1111 cname:x",
    ].map { $0 + "\r\n" }.joined()
}
