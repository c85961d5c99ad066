import Crypto
import Foundation
import ParleyClient
import ParleyRelay
import ParleyRelayTestSupport
import ParleySecurity
import ParleyWire
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The relay with encryption on, as it runs by default, against the client's own link code:
/// what an attacker on the path can do (read, tamper, replay, inject, impersonate the relay)
/// and what the relay does about it.
extension RelayOverUDP {
    @Suite("The encrypted relay") struct SecureRelayTests {
        /// `count` secure members of `room`, all active and seeing each other.
        func members(_ fixture: RelayFixture, room: String, count: Int) throws -> [SecureMember] {
            let members = (0..<count).map { index in
                SecureMember(relayPort: fixture.port, room: room, token: fixture.token(room: room, identity: "member-\(index)"),
                             relayKey: fixture.relayKey!.publicKey)
            }
            for member in members {
                guard member.pump(timeout: 5, until: { $0.isActive }) else {
                    throw TestFailure("a secure member did not join: \(member.link.phase), events \(member.events)")
                }
            }
            for member in members {
                member.pump(timeout: 3) { $0.link.roster.count == count }
            }
            return members
        }

        func pumpAll(_ members: [SecureMember], seconds: Double) {
            let end = now() + seconds
            while now() < end { for member in members { member.pump(timeout: 0.01) } }
        }

        @Test func encryptedMembersHearEachOtherExactlyOnceAndNeverThemselves() throws {
            let fixture = try RelayFixture.startSecure()
            defer { fixture.relay.shutdown() }
            let members = try members(fixture, room: "sealed", count: 3)
            for _ in 0..<20 { for member in members { member.sendMedia() } }
            pumpAll(members, seconds: 0.5)
            for receiver in members {
                for sender in members where sender !== receiver {
                    #expect(receiver.received(from: sender.ssrc) == Array(1...20), "every packet once, in order")
                }
                #expect(receiver.received(from: receiver.ssrc).isEmpty)
            }
        }

        @Test func tamperedTruncatedReplayedStaleAndWrongKeyPacketsAreDroppedCountedAndNeverForwarded() throws {
            let fixture = try RelayFixture.startSecure()
            defer { fixture.relay.shutdown() }
            let members = try members(fixture, room: "attack", count: 2)
            let (talker, listener) = (members[0], members[1])

            // A genuine packet, and forgeries of packets the relay has not seen yet (a forgery of
            // one it has seen is already stopped by the replay window, before any decryption).
            let genuine = try #require(talker.seal(talker.plainMedia()))
            var tampered = try #require(talker.seal(talker.plainMedia()))
            tampered[tampered.count - 20] ^= 0x40
            let truncated = Array(try #require(talker.seal(talker.plainMedia())).dropLast(5))
            talker.socket.send(genuine)
            talker.socket.send(tampered)                               // decrypt_failed
            talker.socket.send(truncated)                              // decrypt_failed
            talker.socket.send(genuine)                                // replayed
            // Stale: 1,200 packets sealed, only the newest sent, then one from far behind the window.
            var sealed: [[UInt8]] = []
            for _ in 0..<1_200 { sealed.append(try #require(talker.seal(talker.plainMedia()))) }
            talker.socket.send(sealed[1_199])
            talker.socket.send(sealed[10])                              // replayed (beyond the window)
            // Sealed under another session's keys (a stranger with its own handshake).
            let outsider = SecureMember(relayPort: fixture.port, room: "elsewhere", token: fixture.token(room: "elsewhere", identity: "eve"),
                                        relayKey: fixture.relayKey!.publicKey)
            outsider.pump(timeout: 5) { $0.isActive }
            let foreign = try #require(outsider.seal(talker.plainMedia()))
            talker.socket.send(foreign)                                // decrypt_failed: from the talker's address, wrong keys

            pumpAll(members + [outsider], seconds: 0.5)
            let heard = listener.received(from: talker.ssrc)
            print("listener heard sequence numbers \(heard) from the talker")
            #expect(heard.count == 2, "only the genuine packet and the newest of the batch get through")
            let metrics = try fixture.relay.metricsText()
            let failed = metricValue(metrics, #"parley_relay_packets_dropped_total{reason="decrypt_failed"}"#) ?? 0
            let replayed = metricValue(metrics, #"parley_relay_packets_dropped_total{reason="replayed"}"#) ?? 0
            print("relay counted decrypt_failed \(failed), replayed \(replayed)")
            #expect(failed == 3)
            #expect(replayed == 2)
        }

        @Test func aCapturedHandshakeReplayedLaterMakesNoSession() throws {
            let fixture = try RelayFixture.startSecure()
            defer { fixture.relay.shutdown() }
            // The victim's handshake, captured on the way.
            let victim = TestClient(relayPort: fixture.port)
            var handshake = ClientHandshake(relayPublicKey: fixture.relayKey!.publicKey)
            victim.send(handshake.helloBytes)
            let cookie = try #require(victim.receiveRaw(timeout: 2))
            let join = try ControlMessage(body: .join(.init(ssrc: 5, room: "r", token: fixture.token(room: "r", identity: "victim"), software: "t"))).serialized()
            let captured = try cookie.withUnsafeBytes { try handshake.makeInit(cookieReply: $0, payload: join) }
            victim.send(captured)
            let response = try #require(victim.receiveRaw(timeout: 2))
            #expect(response.first == SecureMessageType.handshakeResponse.rawValue)

            // Replayed from another address: its cookie is bound to the victim's.
            let attacker = TestClient(relayPort: fixture.port)
            attacker.send(captured)
            #expect(attacker.receiveRaw(timeout: 0.5) == nil)
            // Replayed from the victim's address once the victim's session is gone.
            let (_, session) = try response.withUnsafeBytes { try handshake.finish(response: $0, nowNanoseconds: 0) }
            let leave = try ControlMessage(sequence: 1, isReliable: true, body: .leave(.init())).serialized()
            var sealedLeave = [UInt8](repeating: 0, count: SecureSession.sealedSize(plaintextCount: leave.count))
            let count = try leave.withUnsafeBytes { plain in try sealedLeave.withUnsafeMutableBytes { try session.seal(plain, into: $0, nowNanoseconds: 0) } }
            victim.send(Array(sealedLeave.prefix(count)))
            victim.drain(quiet: 0.3)
            victim.send(captured)
            victim.drain(quiet: 0.5)
            let metrics = try fixture.relay.metricsText()
            #expect(metricValue(metrics, #"parley_relay_packets_dropped_total{reason="cookie_invalid"}"#) == 1)
            #expect(metricValue(metrics, #"parley_relay_packets_dropped_total{reason="handshake_replayed"}"#) == 1)
            #expect(metricValue(metrics, #"parley_relay_joins_total{result="accepted"}"#) == 1, "the replays made no session")
        }

        @Test func aClientPinningAnotherKeyRefusesWithAClearMessage() throws {
            let fixture = try RelayFixture.startSecure()
            defer { fixture.relay.shutdown() }
            let member = SecureMember(relayPort: fixture.port, room: "r", token: fixture.token(room: "r", identity: "ada"),
                                      relayKey: RelayKey().publicKey)
            member.pump(timeout: 3) { $0.joinedOrFailed() }
            guard case let .failed(failure) = member.link.phase else { Issue.record("expected a refusal, got \(member.link.phase)"); return }
            #expect(failure == .relayKeyMismatch(relay: "127.0.0.1:\(fixture.port)"))
            #expect(failure.exitCode == 4)
            print("the client says: \(failure)")
            #expect(failure.description.contains("different key"))
        }

        @Test func aWireCaptureHoldsNoTokenNoRoomAndNoAudioPayload() throws {
            let fixture = try RelayFixture.startSecure()
            defer { fixture.relay.shutdown() }
            // Every datagram both ways passes through a recording forwarder.
            let tap = try CapturingForwarder(relayPort: fixture.port)
            defer { tap.stop() }
            let token = fixture.token(room: "private-room", identity: "ada")
            let payload = Array("OPUS-FRAME-PLAINTEXT-MARKER-0123456789".utf8)
            let ada = SecureMember(relayPort: tap.port, room: "private-room", token: token, relayKey: fixture.relayKey!.publicKey)
            let bob = SecureMember(relayPort: tap.port, room: "private-room", token: fixture.token(room: "private-room", identity: "bob"),
                                   relayKey: fixture.relayKey!.publicKey)
            for member in [ada, bob] { member.pump(timeout: 5) { $0.isActive } }
            for _ in 0..<10 { ada.sendMedia(payload: payload); bob.sendMedia(payload: payload) }
            pumpAll([ada, bob], seconds: 0.5)
            #expect(bob.received(from: ada.ssrc).count == 10, "the call worked through the tap")
            let captured = tap.captured
            let wire = captured.flatMap { $0 }
            print("captured \(captured.count) datagrams, \(wire.count) bytes")
            #expect(captured.count > 40)
            for (secret, name) in [(Array(token.utf8), "token"), (Array(token.utf8.suffix(43)), "token signature"),
                                   (payload, "audio payload"), (Array("private-room".utf8), "room name"), (Array("ada".utf8) + [0], "identity")] {
                #expect(!wire.contains(subsequence: secret), "the \(name) must not appear on the wire")
            }
            #expect(captured.allSatisfy { PacketKind($0.withUnsafeBytes { $0 }) != .rtp }, "no RTP travels in the clear")
        }

        @Test func eachSideTellsTheOtherWhenOnlyOneUsesEncryption() throws {
            let secure = try RelayFixture.startSecure()
            defer { secure.relay.shutdown() }
            let plaintextClient = SecureMember(relayPort: secure.port, room: "r", token: secure.token(room: "r", identity: "old"), relayKey: nil)
            plaintextClient.pump(timeout: 3) { $0.joinedOrFailed() }
            #expect(plaintextClient.link.phase == .failed(.refused(code: .encryptionRequired,
                message: "this relay accepts encrypted clients only: use an invite with a key= and no --insecure")))

            let insecure = try RelayFixture.start()
            defer { insecure.relay.shutdown() }
            let secureClient = SecureMember(relayPort: insecure.port, room: "r", token: insecure.token(room: "r", identity: "new"),
                                            relayKey: RelayKey().publicKey)
            secureClient.pump(timeout: 3) { $0.joinedOrFailed() }
            guard case let .failed(failure) = secureClient.link.phase else { Issue.record("\(secureClient.link.phase)"); return }
            #expect(failure.exitCode == 4)
            print("the client says: \(failure)")
        }

        @Test func shutdownGoodbyeIsSealedAndAcknowledged() throws {
            let fixture = try RelayFixture.startSecure()
            let members = try members(fixture, room: "bye", count: 2)
            let stopping = Thread { fixture.relay.shutdown() }
            stopping.start()
            for member in members {
                member.pump(timeout: 3) { $0.events.contains { if case .reconnecting = $0 { true } else { false } } }
                #expect(member.events.contains { if case .reconnecting = $0 { true } else { false } }, "\(member.events)")
            }
        }
    }
}

/// A UDP forwarder between clients and the relay that keeps a copy of every datagram: what
/// someone on the path would record.
final class CapturingForwarder: @unchecked Sendable {
    let port: Int
    private let front: TestClient
    private var backs: [UInt16: TestClient] = [:]
    private var clientAddress: [UInt16: sockaddr_in] = [:]
    private let lock = NSLock()
    private var records: [[UInt8]] = []
    private var running = true
    private var thread: Thread!

    init(relayPort: Int) throws {
        front = TestClient(relayPort: relayPort)
        port = Int(front.port)
        thread = Thread { [unowned self] in self.run(relayPort: relayPort) }
        thread.start()
    }

    var captured: [[UInt8]] { lock.withLock { records } }

    func stop() { lock.withLock { running = false } }

    private func run(relayPort: Int) {
        while lock.withLock({ running }) {
            // Client → relay: through a per-client back socket, so replies find their way.
            var pollers = [pollfd(fd: front.descriptor, events: Int16(POLLIN), revents: 0)]
            let backList = Array(backs)
            pollers += backList.map { pollfd(fd: $0.value.descriptor, events: Int16(POLLIN), revents: 0) }
            guard poll(&pollers, nfds_t(pollers.count), 20) > 0 else { continue }
            if pollers[0].revents & Int16(POLLIN) != 0 {
                var source = sockaddr_in()
                var length = socklen_t(MemoryLayout<sockaddr_in>.size)
                var buffer = [UInt8](repeating: 0, count: 2048)
                let count = buffer.withUnsafeMutableBytes { raw in
                    withUnsafeMutablePointer(to: &source) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(front.descriptor, raw.baseAddress, raw.count, 0, $0, &length) }
                    }
                }
                if count > 0 {
                    let datagram = Array(buffer[..<count])
                    lock.withLock { records.append(datagram) }
                    let key = UInt16(bigEndian: source.sin_port)
                    if backs[key] == nil {
                        backs[key] = TestClient(relayPort: relayPort)
                        clientAddress[key] = source
                    }
                    backs[key]!.send(datagram)
                }
            }
            for (index, (key, back)) in backList.enumerated() where pollers[index + 1].revents & Int16(POLLIN) != 0 {
                guard let datagram = back.receiveRaw(timeout: 0), var destination = clientAddress[key] else { continue }
                lock.withLock { records.append(datagram) }
                _ = datagram.withUnsafeBytes { raw in
                    withUnsafePointer(to: &destination) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                            sendto(front.descriptor, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                        }
                    }
                }
            }
        }
    }
}

extension Array where Element == UInt8 {
    func contains(subsequence: [UInt8]) -> Bool {
        guard !subsequence.isEmpty, subsequence.count <= count else { return false }
        let first = subsequence[0]
        var index = 0
        while index <= count - subsequence.count {
            if self[index] == first, Array(self[index..<index + subsequence.count]) == subsequence { return true }
            index += 1
        }
        return false
    }
}
