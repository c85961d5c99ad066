import Crypto
import ParleyClient
import ParleySecurity
import ParleyWire

/// A member that speaks the encrypted protocol: the client's own `RelayLink` (handshake,
/// sealing, acknowledgements) driven over a real UDP socket, as `parley call` drives it.
package final class SecureMember {
    package let socket: TestClient
    package var link: RelayLink
    package var events: [LinkEvent] = []
    /// RTP and RTCP received, already opened.
    package var media: [[UInt8]] = []
    package let ssrc: UInt32
    private var sequence: UInt16 = 0

    package init(relayPort: Int, relayHost: String = "127.0.0.1", room: String, token: String, relayKey: Curve25519.KeyAgreement.PublicKey?,
         ssrc: UInt32 = UInt32.random(in: 1...UInt32.max)) {
        socket = TestClient(relayPort: relayPort, relayHost: relayHost)
        self.ssrc = ssrc
        var configuration = RelayLink.Configuration(
            relayAddress: "\(relayHost):\(relayPort)", room: room, token: token, ssrc: ssrc,
            security: relayKey.map { .secure(relayKey: $0) } ?? .insecure
        )
        configuration.joinTimeoutNanoseconds = 3_000_000_000
        link = RelayLink(configuration: configuration)
        take(link.start(now: clock()))
    }

    package func clock() -> UInt64 { UInt64(now() * 1e9) }

    package func take(_ output: RelayLink.Output) {
        events += output.events
        for datagram in output.datagrams { socket.send(datagram) }
    }

    /// Runs the link until `condition` holds or `timeout` seconds pass.
    @discardableResult
    package func pump(timeout: Double, until condition: (SecureMember) -> Bool = { _ in false }) -> Bool {
        let deadline = now() + timeout
        while !condition(self) {
            let left = deadline - now()
            guard left > 0 else { return condition(self) }
            let wait = link.nextDeadline.map { max(0, Double(Int64($0) - Int64(clock())) / 1e9) } ?? left
            if let datagram = socket.receiveRaw(timeout: min(left, max(wait, 0.001))) {
                var received: [[UInt8]] = []
                let output = datagram.withUnsafeBytes { link.handle(datagram: $0, now: clock()) { received.append(Array($0)) } }
                media += received
                take(output)
            }
            take(link.tick(now: clock()))
        }
        return true
    }

    package var isActive: Bool { link.phase == .active }

    /// Sends a text message, as `parley ctl say` does.
    package func say(_ text: String) throws { take(try link.say(text, now: clock())) }

    /// The texts received so far, as (sender, text).
    package var texts: [String] {
        events.compactMap { if case let .text(sender, text) = $0 { return "\(sender): \(text)" }; return nil }
    }

    /// Says goodbye to the relay, as `parley ctl leave` does.
    package func leave() { take(link.leave(now: clock())) }

    package func joinedOrFailed() -> Bool {
        switch link.phase {
        case .active, .failed: return true
        default: return false
        }
    }

    /// An RTP packet whose payload names the sender and its sequence number, sealed for the relay.
    package func sendMedia(payload extra: [UInt8] = []) {
        sequence &+= 1
        send(plainMedia(payload: extra))
    }

    /// From the SSRC the link joined with (a new one if another member held ours).
    package func plainMedia(payload extra: [UInt8] = []) -> [UInt8] {
        let source = link.ssrc
        let marker = withUnsafeBytes(of: source.bigEndian, Array.init) + withUnsafeBytes(of: sequence.bigEndian, Array.init)
        return try! RTPHeader(payloadType: 111, sequenceNumber: sequence, timestamp: UInt32(sequence) &* 960, ssrc: source)
            .serialized(payload: marker + extra)
    }

    /// Seals `plaintext` with the link's current session and sends it.
    package func send(_ plaintext: [UInt8]) {
        guard let sealed = seal(plaintext) else { return }
        socket.send(sealed)
    }

    package func seal(_ plaintext: [UInt8]) -> [UInt8]? {
        plaintext.withUnsafeBytes { link.protector.protect($0, nowNanoseconds: clock()) }
    }

    /// Media received from `ssrc` (by the marker at the start of the payload).
    package func received(from sender: UInt32) -> [UInt16] {
        media.compactMap(origin(ofMedia:)).filter { $0.ssrc == sender }.map(\.sequence)
    }
}
