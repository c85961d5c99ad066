import ArgumentParser
import Crypto
import Foundation
import Logging
import ParleyClient
import ParleyRelay
import ParleySecurity

#if canImport(Glibc)
import Glibc
#endif

/// The trunk benchmark's forwarder: relays in this process (trunks are opened through the
/// relay's API, which only an in-process relay offers today), encrypted, one loop each,
/// every loop pinned to the forwarder's CPU.
///
/// Direct: one relay, every member of a room on it. Trunked: two relays; in each room the
/// first member is on relay A and the others on relay B, with the room's trunk from A to B,
/// so every stream crosses the trunk and each packet is handled by both relays, on one core.
final class TrunkedRelays: ForwarderUnderTest {
    let relays: [Relay]
    let keys: [RelayKey]
    let secret = TokenSecret.random()
    private let loopThreads: [pid_t]
    let trunked: Bool

    init(trunked: Bool, cpu: Int) throws {
        self.trunked = trunked
        var logger = Logger(label: "parley-bench-trunk")
        logger.logLevel = .error
        var configuration = RelayConfiguration()
        configuration.listen = HostAndPort(host: "127.0.0.1", port: 0)
        configuration.threads = 1
        configuration.insecure = false
        configuration.socketBufferBytes = 4 << 20
        configuration.shutdownGraceMilliseconds = 100
        // As RelayProcess.forwardingTuning: the per-member limits are not what is measured.
        configuration.limits.maximumRooms = 10_000
        configuration.limits.packetsPerSecondPerMember = 1_000
        configuration.limits.maximumMemberBitsPerSecond = 1_000_000_000
        // Both relays hold one key: the crowd joins with one pinned key whichever relay a
        // member is on. The trunk handshake is the same with two keys or one.
        let key = RelayKey()
        keys = Array(repeating: key, count: trunked ? 2 : 1)
        var relays: [Relay] = []
        var threads: [pid_t] = []
        for key in keys {
            let before = Set(Self.threadNames().keys)
            relays.append(try Relay.start(configuration: configuration, secret: secret, relayKey: key, logger: logger))
            // The loop names its thread once it runs.
            var loops: [pid_t] = []
            for _ in 0..<200 {
                loops = Self.threadNames().filter { !before.contains($0.key) && $0.value.hasPrefix("relay-loop") }.map(\.key)
                if loops.count == configuration.threads { break }
                usleep(5_000)
            }
            guard loops.count == configuration.threads else { throw ValidationError("cannot find the relay's loop thread to pin it") }
            for thread in loops {
                threads.append(thread)
                // taskset, as RelayProcess pins the relay's process.
                guard ServiceLikeRelay.run(["taskset", "-p", "-c", "\(cpu)", "\(thread)"]) else {
                    throw ValidationError("cannot pin the relay's loop to CPU \(cpu) with taskset; is util-linux installed?")
                }
            }
        }
        self.relays = relays
        loopThreads = threads
        if trunked {
            relays[0].setTrustedRelays([peer(1)])
            relays[1].setTrustedRelays([peer(0)])
        }
    }

    func peer(_ index: Int) -> RelayPeer {
        RelayPeer(address: HostAndPort(host: "127.0.0.1", port: relays[index].localAddress.port!), publicKey: keys[index].publicKey)
    }

    var port: UInt16 { UInt16(relays[0].localAddress.port!) }

    /// Members join relay A; on the trunked pair every member but a room's first joins relay B.
    var entry: MemberEntry { .join(security: .secure(relayKey: keys[0].publicKey), token: hourLongTokens(signedWith: secret)) }

    func prepare(members: [LoadGenerator.Member], socket: MultiAddressSocket) throws {
        guard trunked else { return }
        var first: Set<Int> = []
        for member in members where !first.insert(member.room).inserted {
            socket.routes[member.address.sin_addr.s_addr] = loopbackAddress(port: UInt16(relays[1].localAddress.port!))
        }
        for room in first { try relays[0].openTrunk(room: "room-\(room)", to: peer(1)) }
        let deadline = monotonic() + 20
        while relays[0].openTrunks.count < first.count || relays[1].openTrunks.count < first.count {
            guard monotonic() < deadline else {
                throw ValidationError("only \(relays[0].openTrunks.count) of \(first.count) trunks opened within 20 s")
            }
            usleep(10_000)
        }
    }

    func cpuSeconds() -> Double {
        loopThreads.reduce(0) { $0 + processCPUSeconds(path: "/proc/self/task/\($1)/stat") }
    }

    func stop() { for relay in relays { relay.shutdown() } }

    static func threadNames() -> [pid_t: String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        var names: [pid_t: String] = [:]
        for task in tasks {
            guard let id = pid_t(task) else { continue }
            names[id] = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        }
        return names
    }
}
