import ArgumentParser
import Crypto
import ParleyRelay

#if canImport(Glibc)
import Glibc
#endif

/// `parley-relay serve` as the installed unit runs it with the relay.conf install.sh writes
/// (every core, default socket buffers, the admin port on localhost), with a secret its own
/// `keygen` made: encrypted, as installed, so the load generator joins by handshake and
/// seals every packet with the relay's public key from that file.
final class ServiceLikeRelay: ForwarderUnderTest {
    let port: UInt16
    let pid: pid_t
    let secret: TokenSecret
    let secretPath: String
    let relayKey: Curve25519.KeyAgreement.PublicKey

    init(binary: String) throws {
        port = freeUDPPort()
        secretPath = "/tmp/parley-bench-memory-\(getpid()).secret"
        unlink(secretPath)
        guard Self.run([binary, "keygen", "--out", secretPath]) else { throw ValidationError("\(binary) keygen failed") }
        let secrets = try SecretFile.load(path: secretPath)
        secret = secrets.tokenSecret
        guard let key = secrets.relayKey?.publicKey else { throw ValidationError("\(binary) keygen wrote no relay key pair") }
        relayKey = key
        let arguments = [binary, "serve", "--listen", "127.0.0.1:\(port)", "--admin", "127.0.0.1:0",
                         "--secret-file", secretPath, "--log-level", "warning"]
        pid = try spawnProcess(arguments, discardingOutput: true)
        usleep(300_000)
        var status: Int32 = 0
        guard waitpid(pid, &status, WNOHANG) == 0 else { throw ValidationError("\(binary) exited at once; run it by hand to see why") }
    }

    var entry: MemberEntry { .join(security: .secure(relayKey: relayKey), token: hourLongTokens(signedWith: secret)) }

    func cpuSeconds() -> Double { processCPUSeconds(path: "/proc/\(pid)/stat") }

    func stop() {
        stopProcess(pid)
        unlink(secretPath)
    }

    /// Runs to completion with its standard output discarded; true on exit 0.
    static func run(_ arguments: [String]) -> Bool {
        guard let child = try? spawnProcess(arguments, discardingOutput: true) else { return false }
        var status: Int32 = 0
        waitpid(child, &status, 0)
        return status == 0
    }
}
