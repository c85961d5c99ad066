import ArgumentParser
import ParleyBasics
import ParleyClient
import ParleySecurity
import ParleyWire

#if canImport(Glibc)
import Glibc
#endif

/// Joins every member of a load generator's rooms as `parley call` does, each through its own
/// `RelayLink` (hello, cookie, handshake carrying the join, ready, roster; a plaintext join
/// on a relay run `--insecure`), all of them at once over one ``MultiAddressSocket``.
///
/// The link is the client's, so the benchmarks join exactly as a client does; once joined,
/// the load generator seals and opens media with each member's session itself, since a
/// link's per-datagram copies would make the generator, not the relay, the bottleneck.
struct CrowdJoin {
    let socket: MultiAddressSocket
    let relayPort: UInt16
    let security: RelayLink.Security
    let token: (_ room: String, _ identity: String) -> String
    var timeoutSeconds: Double = 60

    /// Each member's session with an encrypted relay (nil on a plaintext one), once every
    /// member is active; throws if one is refused or any has not joined within the timeout.
    func join(_ members: [LoadGenerator.Member]) throws -> [(session: SecureSession?, receiver: SecureSession.Receiver?)] {
        var links = members.indices.map { index in
            let member = members[index]
            var configuration = RelayLink.Configuration(
                relayAddress: "127.0.0.1:\(relayPort)", room: "room-\(member.room)",
                token: token("room-\(member.room)", "member-\(index)"), ssrc: member.ssrc, security: security)
            configuration.software = "parley-bench"
            configuration.joinTimeoutNanoseconds = UInt64(timeoutSeconds * 1e9)
            return RelayLink(configuration: configuration)
        }
        let start = MonotonicClock.now()
        for index in links.indices {
            for datagram in links[index].start(now: start).datagrams { socket.queue(datagram, from: members[index].address) }
        }
        socket.flush()
        var active = 0
        var lastProgress = start
        while active < links.count {
            let now = MonotonicClock.now()
            if now &- lastProgress >= 5_000_000_000 {
                lastProgress = now
                var phases: [String: Int] = [:]
                for link in links { phases["\(link.phase)", default: 0] += 1 }
                log("  joining: \(active) of \(links.count) members in; \(phases.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
            }
            exchange(&links, members: members, now: now)
            active = 0
            for index in links.indices {
                // A member that is in is left alone: its link's pings, and its reconnecting
                // when a relay busy with thousands of joins answers them late, would hold the
                // others back; once in, a member sends media only.
                if links[index].phase != .active, let deadline = links[index].nextDeadline, deadline <= now {
                    for datagram in links[index].tick(now: now).datagrams { socket.queue(datagram, from: members[index].address) }
                }
                switch links[index].phase {
                case .active: active += 1
                case let .failed(failure): throw ValidationError("member-\(index) could not join: \(failure)")
                default: break
                }
            }
            socket.flush()
            usleep(1000)
        }
        // The last rosters settle (and are acknowledged), so they do not mix with the measurement.
        let settle = MonotonicClock.now() + 300_000_000
        while MonotonicClock.now() < settle {
            exchange(&links, members: members, now: MonotonicClock.now())
            socket.flush()
            usleep(1000)
        }
        for index in links.indices where links[index].ssrc != members[index].ssrc {
            throw ValidationError("the relay moved member-\(index) to another SSRC; the load generator's SSRCs must be unique per room")
        }
        return links.map { ($0.protector.session, $0.sessionReceiver) }
    }

    /// Hands every waiting datagram to its member's link and queues what the links answer.
    private func exchange(_ links: inout [RelayLink], members: [LoadGenerator.Member], now: UInt64) {
        socket.receive { destination, bytes in
            guard let index = memberIndex(destination), index < links.count else { return }
            for datagram in links[index].handle(datagram: bytes, now: now, media: { _ in }).datagrams {
                socket.queue(datagram, from: members[index].address)
            }
        }
    }
}
