import Foundation
import ParleyBasics
import ParleyClient
import ParleyWire

/// A member driven by the client's own `RelayLink` over a real UDP socket, sending wherever
/// the link says its relay is (so it follows redirects as `parley call` does).
final class ClusterLinkClient {
    let descriptor: Int32
    var link: RelayLink
    var events: [LinkEvent] = []

    init(via relay: RelayCluster.Member, room: String, token: String, joinTimeout: Double = 5) {
        descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var configuration = RelayLink.Configuration(relayAddress: relay.address, room: room, token: token, ssrc: UInt32.random(in: 1...UInt32.max),
                                                    security: .secure(relayKey: relay.key.publicKey))
        configuration.joinTimeoutNanoseconds = UInt64(joinTimeout * 1e9)
        link = RelayLink(configuration: configuration)
        take(link.start(now: MonotonicClock.now()))
    }

    deinit { close(descriptor) }

    private func take(_ output: RelayLink.Output) {
        events += output.events
        for datagram in output.datagrams { send(datagram, to: link.relayAddress) }
    }

    private func send(_ bytes: [UInt8], to text: String) {
        guard let parts = try? HostPortText(parsing: text), let port = parts.port else { return }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr(String(parts.host))
        address.sin_port = UInt16(port).bigEndian
        _ = bytes.withUnsafeBytes { raw in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(descriptor, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
    }

    /// Runs the link until `condition` holds or `timeout` seconds pass.
    @discardableResult
    func pump(timeout: Double, until condition: (ClusterLinkClient) -> Bool) -> Bool {
        let deadline = MonotonicClock.now() + UInt64(timeout * 1e9)
        while !condition(self) {
            let now = MonotonicClock.now()
            guard now < deadline else { return false }
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 5) > 0 {
                var buffer = [UInt8](repeating: 0, count: 2048)
                let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
                if count > 0 {
                    take(buffer.withUnsafeBytes { link.handle(datagram: UnsafeRawBufferPointer(rebasing: $0[..<count]), now: MonotonicClock.now()) { _ in } })
                }
            }
            take(link.tick(now: MonotonicClock.now()))
        }
        return true
    }

    var isActive: Bool { link.phase == .active }

    var hasEnded: Bool {
        switch link.phase {
        case .active, .failed: return true
        default: return false
        }
    }
}
