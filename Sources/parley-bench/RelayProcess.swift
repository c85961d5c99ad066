import ArgumentParser
import Crypto
import ParleyClient
import ParleyRelay

#if canImport(Glibc)
import Glibc
#endif

/// `parley-relay serve` in its own process, pinned with `taskset -c CPU`.
final class RelayProcess: ForwarderUnderTest {
    let port: UInt16
    let pid: pid_t
    let secret: TokenSecret
    let secretPath: String
    /// The relay's public key when it runs encrypted; nil with `--insecure`.
    let relayKey: Curve25519.KeyAgreement.PublicKey?

    /// The forwarding benchmark's tuning: its overload test sends up to 10× 50 packets/s per
    /// member, and the per-member limits are not what it measures.
    static let forwardingTuning = ["--max-packet-rate", "1000", "--max-member-bitrate", "1G"]

    /// The admin port, when it was asked for: `/metrics` for a benchmark's own figures.
    private(set) var adminPort: UInt16?

    init(binary: String, cpu: Int, nice: Int, encrypted: Bool = false, tuning: [String] = RelayProcess.forwardingTuning,
         admin: Bool = false) throws {
        port = freeUDPPort()
        let secrets = SecretFile.random()
        secret = secrets.tokenSecret
        relayKey = encrypted ? secrets.relayKey?.publicKey : nil
        secretPath = "/tmp/parley-bench-relay-\(getpid()).secret"
        try secrets.write(path: secretPath, overwrite: true)
        adminPort = admin ? freeTCPPort() : nil
        let arguments = ["nice", "-n", "\(nice)", "taskset", "-c", "\(cpu)", binary, "serve", "--listen", "127.0.0.1:\(port)",
                         "--admin", adminPort.map { "127.0.0.1:\($0)" } ?? "off",
                         "--threads", "1", "--secret-file", secretPath, "--log-level", "error",
                         "--max-rooms", "10000", "--socket-buffer", "4MiB"] + tuning + (encrypted ? [] : ["--insecure"])
        do {
            pid = try spawnProcess(arguments)
        } catch {
            throw ValidationError("cannot start \(binary) under nice and taskset; is util-linux installed?")
        }
        usleep(300_000)
    }

    /// Tokens for this relay's secret, valid for an hour.
    var token: (_ room: String, _ identity: String) -> String { hourLongTokens(signedWith: secret) }

    var entry: MemberEntry {
        .join(security: relayKey.map { .secure(relayKey: $0) } ?? .insecure, token: token)
    }

    func cpuSeconds() -> Double { processCPUSeconds(path: "/proc/\(pid)/stat") }

    func stop() {
        stopProcess(pid)
        unlink(secretPath)
    }
}
