import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The firewall rule as install.sh applies it to a live nftables, in a network namespace of
/// the test's own (the host's firewall is never touched), against Debian's stock ruleset
/// tightened to drop everything: datagrams must reach the relay's port and nothing else (TCP
/// 80 and 443 too with the browser page), after a port change, after a "reboot" that loads
/// only the files, and not after removal.
@Suite("Deploy: the firewall rule on a live nftables")
struct FirewallTests {
    /// Debian's /etc/nftables.conf with the input policy set to drop, as a careful owner would,
    /// letting in only the answers to connections already made (a TCP probe needs them back).
    static let lockedDownRuleset = InstallLifecycleTests.debianNftablesConf.replacing(
        "type filter hook input priority filter;",
        with: "type filter hook input priority filter; policy drop;\n\t\tct state established,related accept")

    /// Sends one datagram to each UDP port on 127.0.0.1 ("7800") and opens a connection to
    /// each TCP port ("t443"), and says which arrived ("7800 open").
    static let probe = """
        import socket, sys
        for name in sys.argv[1:]:
            if name.startswith("t"):
                port = int(name[1:])
                server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                server.bind(("127.0.0.1", port))
                server.listen()
                client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                client.settimeout(0.3)
                try:
                    client.connect(("127.0.0.1", port))
                    print(name, "open")
                except OSError:
                    print(name, "closed")
                client.close()
                server.close()
                continue
            port = int(name)
            receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            receiver.bind(("127.0.0.1", port))
            receiver.settimeout(0.3)
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"voice", ("127.0.0.1", port))
            try:
                receiver.recv(16)
                print(name, "open")
            except socket.timeout:
                print(name, "closed")
        """

    /// The steps, in bash: common.sh's own functions on the live (namespaced) nftables, with
    /// only the two files it writes moved into the test's folder.
    static let scenario = #"""
        set -euo pipefail
        work=$1 deploy=$2 probe=$3
        program=firewall-test
        source "$deploy/common.sh"
        nft_rule_path() { printf '%s/nftables.d/parley-relay.nft' "$work"; }
        nft_main_path() { printf '%s/nftables.conf' "$work"; }
        ports() { echo "-- $1"; python3 -c "$probe" 7800 7801 7900 9800 t80 t443 t8780; }
        ip link set lo up
        nft -f "$work/nftables.conf"
        ports "locked down"
        echo "detected: $(detect_firewall)"
        firewall_open nftables 7800
        firewall_open nftables 7800
        ports "opened 7800 twice"
        echo "rules: $(nft list chain inet filter input | grep -c parley-relay)"
        firewall_open nftables 7900
        ports "moved to 7900"
        firewall_open nftables 7900 80 443
        ports "with the page"
        sed "s|/etc/nftables.d/|$work/nftables.d/|" "$work/nftables.conf" >"$work/boot.conf"
        nft -f "$work/boot.conf"
        ports "after a reboot"
        firewall_close nftables
        ports "closed"
        echo "includes left: $(grep -c parley-relay "$work/nftables.conf" || true)"
        """#

    @Test func theRuleOpensTheRelaysPortAndNothingElseAndLeavesWithTheRelay() throws {
        guard getuid() == 0, let unshare = Command.find("unshare"), Command.find("nft") != nil, Command.find("python3") != nil else {
            print("skipped: a network namespace of its own needs root, unshare, nft and python3 (Scripts/bootstrap installs nftables)")
            return
        }
        let work = try TemporaryRoot()
        try writeText(Self.lockedDownRuleset, to: work.path + "/nftables.conf")
        let result = try Command.run([unshare, "--net", "bash", "-c", Self.scenario, "firewall-test", work.path, Repository.deploy, Self.probe])
        print(result.output)
        #expect(result.succeeded, "\(result.errors)")

        // Each step's verdict per port, in the order the scenario printed them.
        var steps: [String: [String: String]] = [:]
        var step = ""
        for line in result.output.split(separator: "\n") {
            if line.hasPrefix("-- ") { step = String(line.dropFirst(3)); continue }
            let words = line.split(separator: " ")
            if words.count == 2, ["open", "closed"].contains(words[1]) { steps[step, default: [:]][String(words[0])] = String(words[1]) }
        }
        let all = ["7800", "7801", "7900", "9800", "t80", "t443", "t8780"]
        func expectOpen(_ step: String, _ open: Set<String>) {
            let expected = Dictionary(uniqueKeysWithValues: all.map { ($0, open.contains($0) ? "open" : "closed") })
            #expect(steps[step] == expected, "\(step): \(steps[step] ?? [:])")
        }
        expectOpen("locked down", [])
        expectOpen("opened 7800 twice", ["7800"])
        expectOpen("moved to 7900", ["7900"])
        // Caddy's 80 and 443 with the page; the relay's web port behind it (8780) never.
        expectOpen("with the page", ["7900", "t80", "t443"])
        expectOpen("after a reboot", ["7900", "t80", "t443"])
        expectOpen("closed", [])
        #expect(result.output.contains("detected: nftables"))
        #expect(result.output.contains("rules: 1\n"), "opening twice leaves one rule")
        #expect(result.output.contains("includes left: 0"))
        #expect(readText(work.path + "/nftables.conf") == Self.lockedDownRuleset, "the main file is as it was")
    }
}
