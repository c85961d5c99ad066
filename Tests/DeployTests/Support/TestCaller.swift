import ParleyBasics
import ParleyClient
import ParleySecurity
import ParleyWire

#if canImport(Glibc)
import Glibc
#endif

/// A minimal caller for the deploy test: the client's real link to the relay (`RelayLink`:
/// join, address proof, roster, keepalive, rejoin after a restart) over a real UDP socket,
/// sending Opus frames in RTP and keeping what arrives. It stands in for `parley call` until
/// that is on main.
final class TestCaller {
    struct Arrival {
        let ssrc: UInt32
        let sequence: UInt16
        let payload: [UInt8]
        let arrivedAt: UInt64
    }

    let name: String
    let ssrc: UInt32
    private let descriptor: Int32
    private var relay: sockaddr_in
    private(set) var link: RelayLink
    private(set) var events: [LinkEvent] = []
    private(set) var arrivals: [Arrival] = []
    private var sequence: UInt16 = 0
    private var timestamp: UInt32 = 0

    init(name: String, invite: InviteURL, ssrc: UInt32) throws {
        self.name = name
        self.ssrc = ssrc
        relay = try Self.resolve(host: invite.host, port: UInt16(invite.port))
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var local = loopback(port: 0)
        _ = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        self.descriptor = descriptor
        // A deployed relay is encrypted: its invites pin its key (`&key=`), and the caller
        // takes the encrypted link, as `parley call` would. An invite without one is a defect.
        guard let key = invite.parameters.first(where: { $0.name == "key" })?.value else {
            throw TestCallerError.inviteWithoutKey(invite.room)
        }
        let security = RelayLink.Security.secure(relayKey: try RelayKey.publicKey(fromText: key))
        link = RelayLink(configuration: .init(
            relayAddress: "\(invite.host):\(invite.port)", room: invite.room, token: invite.token, ssrc: ssrc, security: security))
    }

    deinit { close(descriptor) }

    /// The invite's host as an IPv4 address (a literal, or a name looked up).
    static func resolve(host: String, port: UInt16) throws -> sockaddr_in {
        var hints = addrinfo()
        hints.ai_family = AF_INET
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        var found: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &found) == 0, let first = found, let address = first.pointee.ai_addr else {
            throw TestFailure("cannot find an IPv4 address for \(host)")
        }
        defer { freeaddrinfo(found) }
        var result = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee }
        result.sin_port = port.bigEndian
        return result
    }

    func start() { deliver(link.start(now: MonotonicClock.now())) }

    var isActive: Bool { link.phase == .active }

    /// Whether the link joined again by itself after losing the relay.
    var rejoined: Bool {
        events.contains { if case .joined(_, _, _, true) = $0 { return true } else { return false } }
    }

    var reconnectReasons: [String] {
        events.compactMap { if case let .reconnecting(reason) = $0 { return reason } else { return nil } }
    }

    /// Sends one 20 ms Opus frame in RTP, as the call's send path does.
    func send(opusFrame payload: [UInt8]) {
        let header = RTPHeader(payloadType: RTPHeader.opusPayloadType, sequenceNumber: sequence, timestamp: timestamp, ssrc: ssrc)
        sequence &+= 1
        timestamp &+= 960
        guard let packet = try? header.serialized(payload: payload) else { return }
        guard case .secure = link.configuration.security else { return transmit(packet) }
        // Sealed with the link's current session; nothing is sent while there is none.
        if let sealed = packet.withUnsafeBytes({ link.protector.protect($0, nowNanoseconds: MonotonicClock.now()) }) {
            transmit(sealed)
        }
    }

    /// Reads what has arrived and lets the link act on its timers, for up to `seconds`.
    func pump(seconds: Double) {
        let end = MonotonicClock.now() + UInt64(seconds * 1e9)
        var buffer = [UInt8](repeating: 0, count: 2048)
        while true {
            let now = MonotonicClock.now()
            if let deadline = link.nextDeadline, deadline <= now { deliver(link.tick(now: now)) }
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                let arrivedAt = MonotonicClock.now()
                let output = buffer.withUnsafeBytes { bytes in
                    link.handle(datagram: UnsafeRawBufferPointer(rebasing: bytes[..<count]), now: arrivedAt) { media in
                        guard case .rtp = PacketKind(media), let view = try? RTPPacketView(parsing: media) else { return }
                        arrivals.append(Arrival(ssrc: view.ssrc, sequence: view.sequenceNumber, payload: Array(view.payload), arrivedAt: arrivedAt))
                    }
                }
                deliver(output)
                continue
            }
            guard now < end else { return }
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            _ = poll(&poller, 1, 2)
        }
    }

    private func deliver(_ output: RelayLink.Output) {
        events += output.events
        output.datagrams.forEach(transmit)
    }

    private func transmit(_ datagram: [UInt8]) {
        _ = datagram.withUnsafeBytes { bytes in
            withUnsafePointer(to: &relay) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(descriptor, bytes.baseAddress, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
    }
}

/// Pumps several callers in turn until `condition` holds or `timeout` passes.
@discardableResult
func pumpAll(_ callers: [TestCaller], timeout: Double, until condition: () -> Bool) -> Bool {
    let end = monotonicSeconds() + timeout
    while monotonicSeconds() < end {
        for caller in callers { caller.pump(seconds: 0.005) }
        if condition() { return true }
    }
    return condition()
}

enum TestCallerError: Error, CustomStringConvertible {
    case inviteWithoutKey(String)

    var description: String {
        switch self {
        case .inviteWithoutKey(let room): "the installed relay's invite for \(room) has no key=: it would run without encryption"
        }
    }
}
