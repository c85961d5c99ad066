import Dispatch
import ParleyBasics
import ParleyWire
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The relay's whole life on a VPS, in a temporary root: `install.sh --root DIR --no-systemd`
/// from the bundle `deploy.sh` ships, the installed binary started with the installed config
/// and secret exactly as the unit's ExecStart runs it, two people in a call through it, an
/// upgrade under load, and `uninstall.sh`.
@Suite("Deploy: install, call, upgrade, uninstall")
struct InstallLifecycleTests {
    /// Debian 12's /etc/nftables.conf as shipped: a filter table whose input chain accepts all.
    static let debianNftablesConf = """
        #!/usr/sbin/nft -f

        flush ruleset

        table inet filter {
        \tchain input {
        \t\ttype filter hook input priority filter;
        \t}
        \tchain forward {
        \t\ttype filter hook forward priority filter;
        \t}
        \tchain output {
        \t\ttype filter hook output priority filter;
        \t}
        }

        """

    /// What a call must sound like to pass.
    struct CallThresholds {
        /// The share of frames that must arrive.
        var delivery: Double
        /// Median one-way delay through the relay.
        var medianDelayMilliseconds: Double
        /// The worst frame's delay; a frame later than this would be a dropout in a real call.
        var worstDelayMilliseconds: Double
        /// What a listener hears against the original recording, 1 being identical (Opus at
        /// 32 kb/s keeps speech well above this; a lost frame costs about 0.01).
        var similarity: Double

        /// On loopback every frame arrives (nothing loses them), within margins a loaded
        /// 2-core CI keeps.
        static let loopback = CallThresholds(delivery: 1, medianDelayMilliseconds: 30, worstDelayMilliseconds: 300, similarity: 0.8)
    }

    // Thresholds, stated once.
    /// SIGTERM to exit: the relay promises 2 s; the margin is for the loaded machine.
    static let maximumShutdownSeconds = 3.0
    /// From the new relay's start to both members back in the room (the link backs off up to 2 s).
    static let maximumRejoinSeconds = 10.0

    @Test func installedRelayCarriesACallKeepsItsKeysThroughAnUpgradeAndUninstallKeepsOnlyTheConfig() throws {
        let root = try TemporaryRoot()
        let workspace = try TemporaryRoot()
        try Command.run(["mkdir", "-p", root.at("/etc")]).expectSuccess()
        try writeText(Self.debianNftablesConf, to: root.at("/etc/nftables.conf"))
        let relayPort = freePort(type: Int32(SOCK_DGRAM.rawValue))
        let adminPort = freePort(type: Int32(SOCK_STREAM.rawValue))
        let builtRelay = try Repository.builtRelay()

        // MARK: Install, from the bundle deploy.sh would copy to the VPS
        let bundle = workspace.path + "/bundle"
        try Repository.runScript("deploy.sh", ["--binary", builtRelay, "--bundle-only", bundle]).expectSuccess()
        let installOptions = ["--root", root.path, "--no-systemd", "--public-host", "127.0.0.1", "--firewall", "nftables",
                              "--room", "lobby", "--identity", "ada"]
        let install = try Command.run(["bash", bundle + "/install.sh"] + installOptions
            + ["--port", "\(relayPort)", "--admin", "127.0.0.1:\(adminPort)"])
        print(install.output)
        try install.expectSuccess()
        let firstInvite = try #require(install.invite, "install.sh printed no invite")
        #expect(firstInvite.host == "127.0.0.1" && firstInvite.port == Int(relayPort) && firstInvite.room == "lobby")

        // MARK: What it put in place
        // Only root can make the service user and hand it the secret; anyone else gets a
        // root filled with their own files (install.sh says so), and these checks wait for root.
        let asRoot = getuid() == 0
        var (uid, gid): (UInt32, UInt32) = (getuid(), getgid())
        if asRoot {
            let user = try #require(root.passwdEntries(named: "parley").first, "no parley user in the root's /etc/passwd")
            #expect(root.passwdEntries(named: "parley").count == 1)
            #expect(user[5] == "/nonexistent" && user[6] == "/usr/sbin/nologin", "no home, no login shell: \(user)")
            (uid, gid) = (UInt32(user[2]) ?? 0, UInt32(user[3]) ?? 0)
        }
        let installed = root.snapshot()
        func expectFile(_ path: String, mode: UInt32, owner: UInt32?, group: UInt32?) {
            guard let entry = installed[path] else { Issue.record("install.sh left no \(path)"); return }
            #expect(entry.mode & 0o7777 == mode, "\(path): \(entry)")
            if asRoot, let owner { #expect(entry.owner == owner, "\(path): \(entry)") }
            if asRoot, let group { #expect(entry.group == group, "\(path): \(entry)") }
        }
        expectFile("/usr/local/bin/parley-relay", mode: 0o755, owner: 0, group: nil)
        expectFile("/etc/parley", mode: 0o750, owner: 0, group: gid)
        expectFile("/etc/parley/relay.conf", mode: 0o640, owner: 0, group: gid)
        expectFile("/etc/parley/relay.secret", mode: 0o600, owner: uid, group: gid)
        #expect(installed["/usr/local/bin/parley-relay"]?.content == readBytes(builtRelay))
        let config = readText(root.at("/etc/parley/relay.conf"))
        #expect(config.contains("listen = 0.0.0.0:\(relayPort)\n") && config.contains("admin = 127.0.0.1:\(adminPort)\n"))
        #expect(readText(root.at("/etc/sysctl.d/60-parley-relay.conf")).contains("net.core.rmem_max = 8388608"))
        #expect(!fileExists(root.at("/etc/systemd/system/parley-relay.service")), "--no-systemd installs no unit")
        let rule = readText(root.at("/etc/nftables.d/parley-relay.nft"))
        #expect(rule.contains("udp dport \(relayPort) accept"), "the firewall opens the relay's port: \(rule)")
        #expect(!rule.contains("\(adminPort)") && rule.components(separatedBy: "accept").count == 2, "and nothing else")
        #expect(readText(root.at("/etc/nftables.conf")).components(separatedBy: "/etc/nftables.d/parley-relay.nft").count == 2)
        if asRoot, let nft = Command.find("nft") {
            // What nftables loads at boot: Debian's file with the rule file included at its end.
            let loaded = workspace.path + "/nftables-as-loaded.conf"
            try writeText(Self.debianNftablesConf + rule, to: loaded)
            let check = try Command.run([nft, "--check", "--file", loaded])
            print("nft --check on Debian's nftables.conf with the rule included: exit \(check.status) \(check.errors)")
            #expect(check.succeeded, "nftables accepts the rule inserted into Debian's input chain")
        } else {
            print("nft --check skipped: \(asRoot ? "nft is not installed (Scripts/bootstrap installs it)" : "it needs root")")
        }

        // MARK: Running it again changes nothing
        let again = try Command.run(["bash", bundle + "/install.sh"] + installOptions)
        try again.expectSuccess()
        expectSame(root.snapshot(), installed, "a second install.sh with the same binary")

        // MARK: The installed relay, as the unit runs it
        let secret = root.at("/etc/parley/relay.secret")
        let unit = Repository.deploy + "/parley-relay.service"
        var relay: InstalledRelay? = try InstalledRelay(unitFile: unit, root: root, secretFile: secret)
        print("relay: \(relay!.commandLine.joined(separator: " ")) (as uid \(asRoot ? uid : getuid()), no new privileges, "
            + "write-xor-execute memory \(relay!.memoryDenyWriteExecute ? "on" : "not offered by this kernel"))")
        let healthyAfter = try #require(relay!.waitUntilHealthy(adminPort: adminPort), "no /healthz: \(relay!.log)")
        print("/healthz answered 200 \(Int(healthyAfter * 1000)) ms after start")
        #expect(try httpGet(port: adminPort, path: "/healthz") == (200, "ok\n"))

        // A second invite, minted with the installed binary and secret as README says.
        let minted = try Command.run([root.at("/usr/local/bin/parley-relay"), "token", "--secret-file", secret,
                                      "--room", "lobby", "--identity", "bea", "--relay", "127.0.0.1:\(relayPort)"])
        try minted.expectSuccess()
        let secondInvite = try #require(minted.invite)

        let ada = try TestCaller(name: "ada", invite: firstInvite, ssrc: 0x0ADA)
        let bea = try TestCaller(name: "bea", invite: secondInvite, ssrc: 0x0BEA)
        let adaSpeech = try SpeechClip(wav: "/usr/share/sounds/alsa/Front_Center.wav")
        let beaSpeech = try SpeechClip(wav: "/usr/share/sounds/alsa/Front_Left.wav")
        ada.start()
        bea.start()
        #expect(pumpAll([ada, bea], timeout: 10) { ada.isActive && bea.isActive && ada.link.roster.count == 2 && bea.link.roster.count == 2 },
                "both join: ada \(ada.events), bea \(bea.events)")
        try expectConversation(ada, adaSpeech, bea, beaSpeech, when: "through the installed relay")

        // MARK: Upgrade: a new binary, installed while the call goes on
        let secretBefore = readBytes(secret), configBefore = readBytes(root.at("/etc/parley/relay.conf"))
        var upgradedBinary = try #require(readBytes(builtRelay))
        upgradedBinary += Array("\nparley upgrade test build\n".utf8)  // trailing bytes: the ELF runs the same, the file differs
        let upgradedPath = workspace.path + "/parley-relay-upgraded"
        try writeBytes(upgradedBinary, to: upgradedPath)
        chmod(upgradedPath, 0o755)
        let upgradeBundle = workspace.path + "/bundle-upgraded"
        try Repository.runScript("deploy.sh", ["--binary", upgradedPath, "--bundle-only", upgradeBundle]).expectSuccess()
        // The callers go on talking to the relay while install.sh runs, as people in a call
        // would (a caller nobody pumps for seconds would give the relay up by itself).
        let upgrading = Mutex<Result<CommandResult, any Error>?>(nil)
        let command = ["bash", upgradeBundle + "/install.sh"] + installOptions
        DispatchQueue.global().async { upgrading.withLock { $0 = Result { try Command.run(command) } } }
        pumpAll([ada, bea], timeout: 150) { upgrading.withLock { $0 != nil } }
        let upgrade = try #require(upgrading.withLock { $0 }).get()
        print(upgrade.output)
        try upgrade.expectSuccess()
        #expect(upgrade.output.contains("upgrading parley-relay"))
        #expect(readBytes(root.at("/usr/local/bin/parley-relay")) == upgradedBinary, "the binary was replaced")
        #expect(readBytes(secret) == secretBefore, "the secret survived the upgrade")
        #expect(readBytes(root.at("/etc/parley/relay.conf")) == configBefore, "the config survived the upgrade")
        #expect(root.passwdEntries(named: "parley").count == (asRoot ? 1 : 0))
        #expect(try #require(upgrade.invite).port == Int(relayPort), "the port comes from the kept relay.conf")

        // The restart systemd does: SIGTERM, members told goodbye, the new binary started.
        let stopped = try #require(relay!.terminate { pumpAll([ada, bea], timeout: 0.01) { false } }, "the relay ignored SIGTERM")
        print("old relay exited \(stopped.status) \(Int(stopped.seconds * 1000)) ms after SIGTERM; "
            + "ada heard: \(ada.reconnectReasons), bea heard: \(bea.reconnectReasons)")
        #expect(stopped.status == 0 && stopped.seconds < Self.maximumShutdownSeconds)
        pumpAll([ada, bea], timeout: 1) { !ada.reconnectReasons.isEmpty && !bea.reconnectReasons.isEmpty }
        #expect(ada.reconnectReasons.first?.contains("restarting") == true && bea.reconnectReasons.first?.contains("restarting") == true,
                "members were told the relay is restarting, not left to time out")
        relay = nil
        relay = try InstalledRelay(unitFile: unit, root: root, secretFile: secret)
        #expect(relay!.waitUntilHealthy(adminPort: adminPort) != nil, "the upgraded relay is healthy: \(relay!.log)")
        let restart = monotonicSeconds()
        // Their old tokens still verify: the secret really is the one they were signed with.
        let rejoined = pumpAll([ada, bea], timeout: Self.maximumRejoinSeconds) {
            ada.rejoined && bea.rejoined && ada.isActive && bea.isActive && ada.link.roster.count == 2 && bea.link.roster.count == 2
        }
        print("both members rejoined \(Int((monotonicSeconds() - restart) * 1000)) ms after the upgraded relay came up")
        #expect(rejoined, "ada \(ada.events.suffix(3)) \(ada.link.phase), bea \(bea.events.suffix(3)) \(bea.link.phase); relay log: \(relay!.log)")
        try expectConversation(ada, adaSpeech, bea, beaSpeech, when: "after the upgrade")
        let final = try #require(relay!.terminate { pumpAll([ada, bea], timeout: 0.01) { false } })
        #expect(final.status == 0)
        relay = nil

        // MARK: Uninstall, with the uninstaller left on the machine
        let uninstall = try Command.run(["bash", root.at("/usr/local/lib/parley-relay/uninstall.sh"), "--root", root.path, "--no-systemd"])
        print(uninstall.output)
        try uninstall.expectSuccess()
        #expect(uninstall.output.contains("kept \(root.at("/etc/parley"))"), "says what it kept")
        let accountFiles = ["/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"]
        let left = root.files().filter { path in !accountFiles.contains { path == $0 || path == $0 + "-" } && path != "/etc/.pwd.lock" }
        print("left after uninstall: \(left.sorted())")
        #expect(left == ["/etc/parley/relay.conf", "/etc/parley/relay.secret", "/etc/nftables.conf"])
        #expect(readText(root.at("/etc/nftables.conf")) == Self.debianNftablesConf, "the include line is gone, the rest untouched")
        #expect(readBytes(secret) == secretBefore)
        #expect(root.passwdEntries(named: "parley").isEmpty && !readText(root.at("/etc/group")).contains("parley:"))
        try Repository.runScript("uninstall.sh", ["--root", root.path, "--no-systemd"]).expectSuccess()
        let purge = try Repository.runScript("uninstall.sh", ["--root", root.path, "--no-systemd", "--purge"])
        try purge.expectSuccess()
        #expect(!fileExists(root.at("/etc/parley")), "--purge removes the config and the secret")
    }

    /// Both talk at once for the length of their clips, 20 ms frames in real time; each must
    /// hear the other's speech whole, on time and recognisably the same.
    func expectConversation(_ a: TestCaller, _ aClip: SpeechClip, _ b: TestCaller, _ bClip: SpeechClip, when: String,
                            thresholds: CallThresholds = .loopback) throws {
        let heardByB = b.arrivals.count, heardByA = a.arrivals.count
        let frames = min(aClip.frames.count, bClip.frames.count)
        var sentAt: [UInt64] = []
        let start = monotonicSeconds()
        for index in 0..<frames {
            sentAt.append(MonotonicClock.now())
            a.send(opusFrame: aClip.frames[index])
            b.send(opusFrame: bClip.frames[index])
            let next = start + Double(index + 1) * 0.02
            while monotonicSeconds() < next { a.pump(seconds: 0.002); b.pump(seconds: 0.002) }
        }
        pumpAll([a, b], timeout: 1) {
            b.arrivals.count - heardByB >= frames && a.arrivals.count - heardByA >= frames
        }
        for (speaker, clip, listener, offset) in [(a, aClip, b, heardByB), (b, bClip, a, heardByA)] {
            let heard = listener.arrivals[offset...].filter { $0.ssrc == speaker.ssrc }
            let payloads = heard.map(\.payload)
            let delays = zip(heard, sentAt).map { Double($0.arrivedAt &- $1) / 1e6 }.sorted()
            let median = delays.isEmpty ? .infinity : delays[delays.count / 2]
            let worst = delays.last ?? .infinity
            let audio = try SpeechClip.decode(payloads)
            let similarity = clip.similarity(toHeard: audio)
            let delivered = Double(heard.count) / Double(frames)
            print("\(when): \(listener.name) heard \(speaker.name): \(heard.count)/\(frames) frames, one-way delay median "
                + "\(rounded(median)) ms, worst \(rounded(worst)) ms, similarity to the recording \(rounded(similarity)), "
                + "level \(rounded(SpeechClip.level(audio))) dBFS")
            #expect(delivered >= thresholds.delivery, "\(listener.name) missed \(frames - heard.count) of \(speaker.name)'s frames \(when)")
            if thresholds.delivery == 1 {
                let intact = payloads == Array(clip.frames.prefix(frames))
                #expect(intact, "the frames arrive whole and in order")
            }
            #expect(median <= thresholds.medianDelayMilliseconds && worst <= thresholds.worstDelayMilliseconds)
            #expect(similarity >= thresholds.similarity, "\(listener.name) hears \(speaker.name)'s speech")
        }
    }

    func expectSame(_ after: [String: TemporaryRoot.Entry], _ before: [String: TemporaryRoot.Entry], _ what: String) {
        let changed = Set(after.keys).union(before.keys).filter { after[$0] != before[$0] }.sorted()
        #expect(changed.isEmpty, "\(what) changed \(changed)")
    }
}

/// Two decimals, for the printed measurements.
func rounded(_ value: Double) -> String {
    value.isFinite ? "\((value * 100).rounded() / 100)" : "\(value)"
}

extension CommandResult {
    /// The invite URL the script printed (install.sh and `parley-relay token` print it on its own line).
    var invite: InviteURL? {
        output.split(separator: "\n").last { $0.hasPrefix("parley://") }.flatMap { try? InviteURL(parsing: String($0)) }
    }

    func expectSuccess(sourceLocation: SourceLocation = #_sourceLocation) throws {
        if !succeeded {
            Issue.record("\(transcript)", sourceLocation: sourceLocation)
            throw TestFailure("a command failed")
        }
    }
}
