import Logging
import NIOCore
import ParleyAdmin
import ParleyBasics
import ParleyRelay
import ParleySecurity
import ParleyWire

#if canImport(Glibc)
import Glibc
#endif

/// A real UDP socket on 127.0.0.1 speaking Parley's control protocol by hand, as a client
/// would: the relay under test sees nothing but datagrams.
package final class TestClient {
    package let descriptor: Int32
    package let port: UInt16
    package let relayPort: UInt16
    /// The relay's IPv4 address: 127.0.0.1, or another loopback address for a second relay.
    package let relayHost: String
    /// The address this client sends from.
    package let localHost: String
    /// Control messages received while waiting for something else, in arrival order.
    package var controlInbox: [ControlMessage] = []
    package var mediaInbox: [[UInt8]] = []
    package var rtcpInbox: [[UInt8]] = []
    package var joined: ControlMessage.Joined?
    package var ssrc: UInt32 = 0
    private var nextSequence: UInt32 = 1

    /// `localHost`: the loopback address this client sends from (another host, as far as the relay can tell).
    package init(relayPort: Int, relayHost: String = "127.0.0.1", localHost: String = "127.0.0.1", receiveBuffer: Int = 4 << 20) {
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        self.descriptor = descriptor
        precondition(descriptor >= 0, "socket() failed: \(errno)")
        var size = Int32(receiveBuffer)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr(localHost)
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        precondition(bound == 0, "bind() failed: \(errno)")
        var local = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        self.port = UInt16(bigEndian: local.sin_port)
        self.relayPort = UInt16(relayPort)
        self.relayHost = relayHost
        self.localHost = localHost
    }

    deinit { close(descriptor) }

    package var address: SocketAddress { try! SocketAddress(ipAddress: localHost, port: Int(port)) }

    package func send(_ bytes: [UInt8]) {
        sendLoopback(bytes, from: descriptor, toPort: relayPort, host: relayHost)
    }

    package func send(_ message: ControlMessage) {
        send(try! message.serialized())
    }

    /// One datagram, or nil after `timeout` seconds.
    package func receiveRaw(timeout: Double) -> [UInt8]? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, Int32(timeout * 1000)) > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 2048)
        let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        guard count >= 0 else { return nil }
        return Array(buffer[..<count])
    }

    /// Reads datagrams into the inboxes until `condition` holds or `timeout` passes; acks
    /// every reliable control message as a client must.
    @discardableResult
    package func pump(timeout: Double, until condition: (TestClient) -> Bool = { _ in false }) -> Bool {
        let deadline = now() + timeout
        while !condition(self) {
            let left = deadline - now()
            guard left > 0, let datagram = receiveRaw(timeout: left) else { return condition(self) }
            file(datagram)
        }
        return true
    }

    /// Whatever is waiting right now.
    package func drain(quiet: Double = 0.05) {
        while let datagram = receiveRaw(timeout: quiet) { file(datagram) }
    }

    private func file(_ datagram: [UInt8]) {
        switch datagram.withUnsafeBytes({ PacketKind($0) }) {
        case .rtp: mediaInbox.append(datagram)
        case .rtcp: rtcpInbox.append(datagram)
        case .control:
            guard let message = try? ControlMessage(parsing: datagram) else { return }
            if message.isReliable, autoAck { send(ControlMessage(body: .ack(.init(sequence: message.sequence)))) }
            controlInbox.append(message)
        case .handshake, .sealed, .stun, .dtls, .unknown: break
        }
    }

    package var autoAck = true

    package func takeSequence() -> UInt32 {
        defer { nextSequence += 1 }
        return nextSequence
    }

    // MARK: The join exchange

    /// Sends join (retransmitting) until joined or error arrives; returns the answer.
    package func join(room: String, token: String, ssrc: UInt32, capabilities: ControlMessage.Capabilities = [], identityKey: [UInt8] = [],
                      timeout: Double = 5) -> ControlMessage.Body? {
        self.ssrc = ssrc
        let join = ControlMessage(sequence: takeSequence(), body: .join(.init(
            ssrc: ssrc, room: room, token: token, software: "parley-tests", capabilities: capabilities, identityKey: identityKey)))
        let deadline = now() + timeout
        while now() < deadline {
            send(join)
            var answer: ControlMessage.Body?
            pump(timeout: 0.3) { client in
                answer = client.controlInbox.first { message in
                    switch message.body { case .joined, .error: return true; default: return false }
                }?.body
                return answer != nil
            }
            if let answer {
                controlInbox.removeAll { if case .joined = $0.body { return true }; if case .error = $0.body { return true }; return false }
                if case let .joined(joined) = answer { self.joined = joined }
                return answer
            }
        }
        return nil
    }

    /// Sends ready (retransmitting) until a roster arrives.
    package func ready(timeout: Double = 5) -> Bool {
        guard let joined else { return false }
        let deadline = now() + timeout
        while now() < deadline {
            send(ControlMessage(sequence: takeSequence(), body: .ready(.init(cookie: joined.cookie))))
            if pump(timeout: 0.3, until: { $0.latestRoster != nil }) { return true }
        }
        return false
    }

    /// The newest complete roster received.
    package var latestRoster: [ControlMessage.Roster.Member]? {
        let rosters = controlInbox.compactMap { message -> ControlMessage.Roster? in
            if case let .roster(roster) = message.body { return roster }
            return nil
        }
        guard let version = rosters.map(\.version).max() else { return nil }
        let pages = rosters.filter { $0.version == version }
        let count = Int(pages[0].pageCount)
        var members: [ControlMessage.Roster.Member] = []
        for index in 0..<count {
            guard let page = pages.first(where: { Int($0.pageIndex) == index }) else { return nil }
            members += page.members
        }
        return members
    }

    /// Waits until the roster lists exactly `identities`.
    package func waitForRoster(_ identities: Set<String>, timeout: Double = 5) -> Bool {
        pump(timeout: timeout) { client in
            client.latestRoster.map { Set($0.map(\.identity)) == identities } ?? false
        }
    }

    package var goodbyes: [ControlMessage.Goodbye] {
        controlInbox.compactMap { if case let .goodbye(goodbye) = $0.body { return goodbye }; return nil }
    }

    package var errors: [ControlMessage.ErrorReply] {
        controlInbox.compactMap { if case let .error(error) = $0.body { return error }; return nil }
    }

    // MARK: Media

    /// An Opus-like RTP packet whose payload names the sender and sequence, so a receiver can
    /// tell exactly which packets arrived.
    package func rtp(sequence: UInt16, payloadSize: Int = 80, ssrc overrideSSRC: UInt32? = nil) -> [UInt8] {
        var payload = [UInt8](repeating: 0xA5, count: payloadSize)
        withUnsafeBytes(of: ssrc.bigEndian) { for index in 0..<4 { payload[index] = $0[index] } }
        withUnsafeBytes(of: sequence.bigEndian) { for index in 0..<2 { payload[4 + index] = $0[index] } }
        let header = RTPHeader(payloadType: RTPHeader.opusPayloadType, sequenceNumber: sequence,
                               timestamp: UInt32(sequence) * 960, ssrc: overrideSSRC ?? ssrc)
        return try! header.serialized(payload: payload)
    }

    package func sendRTP(sequence: UInt16, payloadSize: Int = 80) {
        send(rtp(sequence: sequence, payloadSize: payloadSize))
    }
}

/// (sender SSRC, sequence) of a packet built by ``TestClient/rtp(sequence:payloadSize:ssrc:)``.
package func origin(ofMedia datagram: [UInt8]) -> (ssrc: UInt32, sequence: UInt16)? {
    datagram.withUnsafeBytes { raw in
        guard let view = try? RTPPacketView(parsing: raw), view.payload.count >= 6 else { return nil }
        let payload = view.payload
        let ssrc = UInt32(payload[0]) << 24 | UInt32(payload[1]) << 16 | UInt32(payload[2]) << 8 | UInt32(payload[3])
        return (ssrc, UInt16(payload[4]) << 8 | UInt16(payload[5]))
    }
}

/// Sends `bytes` from the UDP socket `descriptor` to `host`:`port`.
package func sendLoopback(_ bytes: [UInt8], from descriptor: Int32, toPort port: UInt16, host: String = "127.0.0.1") {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr(host)
    address.sin_port = port.bigEndian
    _ = bytes.withUnsafeBytes { raw in
        withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(descriptor, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    }
}

/// The monotonic clock (``MonotonicClock``) in seconds.
package func now() -> Double { Double(MonotonicClock.now()) / 1e9 }

/// A relay on 127.0.0.1 with ephemeral ports, and the secret to mint its tokens.
package struct RelayFixture {
    package let relay: Relay
    package let secret: TokenSecret
    /// The relay's key pair when it runs encrypted.
    package var relayKey: RelayKey?
    /// Its admin port (/metrics, /healthz, the admin API), when the test asked for one.
    package var admin: AdminServer?

    /// An encrypted relay, as `parley-relay serve` runs by default.
    package static func startSecure(threads: Int = 1, logger: Logger? = nil, configure: (inout RelayConfiguration) -> Void = { _ in }) throws -> RelayFixture {
        let key = RelayKey()
        var fixture = try start(threads: threads, relayKey: key, logger: logger) { configuration in
            configuration.insecure = false
            configure(&configuration)
        }
        fixture.relayKey = key
        return fixture
    }

    /// `logger`: where the relay's log goes (by default, warnings and worse to the console);
    /// `admin`: serve its admin port too, on a free port (``adminPort``), and stop it with ``stop()``.
    /// `placement`: where rooms live when the relay is one of a cluster's (none: every join is admitted here).
    package static func start(threads: Int = 1, relayKey: RelayKey? = nil, secret: TokenSecret? = nil, logger: Logger? = nil, admin: Bool = false,
                      placement: RoomPlacement? = nil, configure: (inout RelayConfiguration) -> Void = { _ in }) throws -> RelayFixture {
        var configuration = RelayConfiguration()
        configuration.listen = HostAndPort(host: "127.0.0.1", port: 0)
        configuration.threads = threads
        configuration.socketBufferBytes = 4 << 20
        // Test clients that stop reading never ack goodbye; don't wait a full second for them.
        configuration.shutdownGraceMilliseconds = 300
        // The plaintext test client speaks the protocol without the secure transport, so these
        // tests run the relay --insecure; SecureRelayTests cover the encrypted relay.
        configuration.insecure = true
        configure(&configuration)
        let secret = secret ?? TokenSecret.random()
        var log = Logger(label: "parley-relay-test")
        log.logLevel = .warning
        let relay = try Relay.start(configuration: configuration, secret: secret, relayKey: relayKey, placement: placement, logger: logger ?? log)
        var fixture = RelayFixture(relay: relay, secret: secret)
        if admin {
            fixture.admin = try AdminServer.start(serving: relay, at: HostAndPort(host: "127.0.0.1", port: 0), token: nil, logger: logger ?? log)
        }
        return fixture
    }

    package var port: Int { relay.localAddress.port! }

    /// The admin port's, when it runs.
    package var adminPort: Int? { admin?.localAddress?.port }

    /// Shuts the relay down, then closes its admin port, as `parley-relay serve` does.
    package func stop() {
        relay.shutdown()
        admin?.close()
    }

    package func token(room: String, identity: String, canPublish: Bool = true, isModerator: Bool = false, lifetime: Int64 = 3600,
                       endToEnd: Bool = false) -> String {
        let now = unixNow()
        return AccessToken(identity: identity, room: room, issuedAt: now, expiresAt: now + lifetime, canPublish: canPublish, isModerator: isModerator,
                           endToEndEncrypted: endToEnd)
            .signed(with: secret)
    }

    /// A client joined and active in `room`, with a random SSRC.
    package func member(_ identity: String, room: String, canPublish: Bool = true, capabilities: ControlMessage.Capabilities = [],
                        identityKey: [UInt8] = [], endToEnd: Bool = false) throws -> TestClient {
        let client = TestClient(relayPort: port)
        let answer = client.join(
            room: room, token: token(room: room, identity: identity, canPublish: canPublish, endToEnd: endToEnd), ssrc: UInt32.random(in: 1...UInt32.max),
            capabilities: capabilities, identityKey: identityKey)
        guard case .joined = answer else { throw TestFailure("\(identity) could not join \(room): \(String(describing: answer))") }
        guard client.ready() else { throw TestFailure("\(identity) got no roster after ready") }
        return client
    }

    /// Members that all see the full roster.
    package func room(_ name: String, size: Int) throws -> [TestClient] {
        let clients = try (0..<size).map { try member("member-\($0)", room: name) }
        let everyone = Set((0..<size).map { "member-\($0)" })
        for client in clients {
            guard client.waitForRoster(everyone) else { throw TestFailure("a member of \(name) never saw all \(size) members") }
        }
        return clients
    }
}

package struct TestFailure: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

/// Seconds since 1970 (``WallClock``), for token times.
package func unixNow() -> Int64 { WallClock.seconds() }
