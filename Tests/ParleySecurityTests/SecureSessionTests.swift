import Crypto
import Dispatch
import Synchronization
import Testing
@testable import ParleySecurity
import ParleyWire

/// A pair of sessions as a completed handshake would make them.
func sessionPair(policy: SecureSession.Policy = .standard) throws -> (client: SecureSession, relay: SecureSession) {
    let relayKey = RelayKey()
    var initiator = NoiseNKInitiator(relayPublicKey: relayKey.publicKey, prologue: [])
    var responder = NoiseNKResponder(staticKey: relayKey.privateKey, prologue: [])
    _ = try responder.readMessage1(try initiator.writeMessage1(payload: []))
    let (message2, relayKeys) = try responder.writeMessage2(payload: [])
    let (_, clientKeys) = try initiator.readMessage2(message2)
    return (
        SecureSession(keys: clientKeys, localIndex: 11, remoteIndex: 22, policy: policy, nowNanoseconds: 0),
        SecureSession(keys: relayKeys, localIndex: 22, remoteIndex: 11, policy: policy, nowNanoseconds: 0)
    )
}

extension SecureSession {
    func seal(_ plaintext: [UInt8], now: UInt64 = 0) throws -> [UInt8] {
        var output = [UInt8](repeating: 0, count: SecureSession.sealedSize(plaintextCount: plaintext.count))
        let count = try plaintext.withUnsafeBytes { input in
            try output.withUnsafeMutableBytes { try seal(input, into: $0, nowNanoseconds: now) }
        }
        return Array(output.prefix(count))
    }

    func open(_ packet: [UInt8]) throws(SecurityError) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: max(0, packet.count))
        var result: Result<Int, SecurityError> = .success(0)
        packet.withUnsafeBytes { input in
            output.withUnsafeMutableBytes { out in
                do throws(SecurityError) { result = .success(try open(input, into: out)) } catch { result = .failure(error) }
            }
        }
        return Array(output.prefix(try result.get()))
    }
}

@Suite("Sealed packets: confidentiality, integrity, replay, rekeying")
struct SecureSessionTests {
    let rtp: [UInt8] = try! RTPHeader(payloadType: 111, sequenceNumber: 7, timestamp: 960, ssrc: 0xABCD)
        .serialized(payload: Array("opus frame bytes".utf8))

    @Test func aSealedPacketOpensToTheSameBytesAndHidesThem() throws {
        let (client, relay) = try sessionPair()
        let sealed = try client.seal(rtp)
        #expect(sealed.count == rtp.count + SealedHeader.overhead)
        #expect(try relay.open(sealed) == rtp)
        // Neither the RTP header nor the payload is visible on the wire.
        #expect(!sealed.contains(subsequence: Array("opus frame".utf8)))
        #expect(!sealed.contains(subsequence: Array(rtp[0..<12])))
        sealed.withUnsafeBytes { #expect(PacketKind($0) == .sealed) }
    }

    @Test func everyTamperedByteIsDetectedAndLeavesTheSessionUsable() throws {
        let (client, relay) = try sessionPair()
        let sealed = try client.seal(rtp)
        for index in sealed.indices {
            var tampered = sealed
            tampered[index] ^= 0x01
            #expect(throws: SecurityError.self) { try relay.open(tampered) }
        }
        #expect(try relay.open(sealed) == rtp, "the genuine packet still opens after the forgeries")
    }

    @Test func truncatedPacketsAreRejected() throws {
        let (client, relay) = try sessionPair()
        let sealed = try client.seal(rtp)
        for length in 0..<sealed.count {
            #expect(throws: SecurityError.self) { try relay.open(Array(sealed.prefix(length))) }
        }
    }

    @Test func aReplayedPacketIsRejected() throws {
        let (client, relay) = try sessionPair()
        let sealed = try client.seal(rtp)
        #expect(try relay.open(sealed) == rtp)
        #expect(throws: SecurityError.replayed(counter: 0)) { try relay.open(sealed) }
    }

    @Test func reorderingWithinTheWindowIsAcceptedOnceAndBeyondItRejected() throws {
        let (client, relay) = try sessionPair()
        let packets = try (0..<1_200).map { _ in try client.seal(rtp) }
        #expect(try relay.open(packets[1_199]) == rtp)
        // 1199 - 300 = 899 behind the newest, inside the 960-packet tolerance.
        #expect(try relay.open(packets[300]) == rtp)
        #expect(throws: SecurityError.replayed(counter: 300)) { try relay.open(packets[300]) }
        // 1199 - 100 = 1099 behind: outside the window, rejected as too old.
        #expect(throws: SecurityError.replayed(counter: 100)) { try relay.open(packets[100]) }
    }

    /// A reader on one thread takes the receiving half out and opens without the session's
    /// lock: it follows rekeys and rejects replays as the session did, and the session, its
    /// half gone, opens nothing, so no packet can be accepted twice through two windows.
    @Test func theReceivingHalfTakenOutOpensAloneAndTheSessionNoLonger() throws {
        let (client, relay) = try sessionPair(policy: .init(rekeyAfterPackets: 10, rekeyAfterSeconds: 3_600))
        var receiver = try #require(client.takeReceiver())
        #expect(client.takeReceiver() == nil, "there is one receiving half")
        func open(_ packet: [UInt8]) throws(SecurityError) -> [UInt8] {
            var output = [UInt8](repeating: 0, count: packet.count)
            var result: Result<Int, SecurityError> = .success(0)
            packet.withUnsafeBytes { input in
                output.withUnsafeMutableBytes { out in
                    do throws(SecurityError) { result = .success(try receiver.open(input, into: out)) } catch { result = .failure(error) }
                }
            }
            return Array(output.prefix(try result.get()))
        }
        let sealed = try (0..<25).map { _ in try relay.seal(rtp) }
        for packet in sealed { #expect(try open(packet) == rtp, "through two rekeys") }
        #expect(throws: SecurityError.replayed(counter: 24)) { try open(sealed[24]) }
        #expect(throws: SecurityError.self) { try client.open(try relay.seal(rtp)) }
        #expect(try client.seal(rtp).count == SecureSession.sealedSize(plaintextCount: rtp.count), "the sending half stays")
    }

    @Test func aPacketSealedForAnotherSessionDoesNotOpen() throws {
        let (client, _) = try sessionPair()
        let (_, otherRelay) = try sessionPair()
        #expect(throws: SecurityError.authenticationFailed) { try otherRelay.open(try client.seal(rtp)) }
    }

    @Test func bothDirectionsAreIndependent() throws {
        let (client, relay) = try sessionPair()
        let up = try client.seal(rtp)
        let down = try relay.seal(rtp)
        #expect(up != down)
        #expect(try client.open(down) == rtp)
        #expect(try relay.open(up) == rtp)
        // A packet reflected back to its sender does not open.
        #expect(throws: SecurityError.self) { try client.open(up) }
    }

    @Test func theSenderRekeysOnScheduleAndTheReceiverFollowsKeepingStragglers() throws {
        let (client, relay) = try sessionPair(policy: .init(rekeyAfterPackets: 10, rekeyAfterSeconds: 3_600))
        var sealed: [[UInt8]] = []
        for _ in 0..<35 { sealed.append(try client.seal(rtp)) }
        #expect(client.sendingKeyPhase == true, "three rekeys: phase flipped an odd number of times")
        // Deliver phase 1 before the last packets of phase 0 (9), then the rest in order.
        #expect(try relay.open(sealed[12]) == rtp)
        #expect(try relay.open(sealed[9]) == rtp, "a straggler under the previous key still opens")
        for index in sealed.indices where index != 12 && index != 9 {
            #expect(try relay.open(sealed[index]) == rtp, "packet \(index)")
        }
    }

    @Test func aForgedPhaseFlipDoesNotDisturbTheSession() throws {
        let (client, relay) = try sessionPair()
        var forged = try client.seal(rtp)
        forged[2] ^= 0x80  // flip the key phase bit
        #expect(throws: SecurityError.authenticationFailed) { try relay.open(forged) }
        #expect(try relay.open(try client.seal(rtp)) == rtp)
    }

    @Test func timeBasedRekeyHappensAfterTheInterval() throws {
        let (client, relay) = try sessionPair(policy: .init(rekeyAfterPackets: .max, rekeyAfterSeconds: 600))
        #expect(try relay.open(try client.seal(rtp, now: 1_000_000_000)) == rtp)
        #expect(client.sendingKeyPhase == false)
        #expect(try relay.open(try client.seal(rtp, now: 601_000_000_000)) == rtp)
        #expect(client.sendingKeyPhase == true)
    }

    @Test func aSealTimedJustBeforeTheLastRekeyDoesNotRekeyAgain() throws {
        // One thread rekeys at 600.5 s; another read the clock at 600.4 s and seals after it.
        let (client, relay) = try sessionPair(policy: .init(rekeyAfterPackets: .max, rekeyAfterSeconds: 600))
        #expect(try relay.open(try client.seal(rtp, now: 600_500_000_000)) == rtp)
        #expect(client.sendingKeyPhase == true)
        #expect(try relay.open(try client.seal(rtp, now: 600_400_000_000)) == rtp)
        #expect(client.sendingKeyPhase == true, "a timestamp older than the key is no reason to rekey")
        #expect(try relay.open(try client.seal(rtp, now: 601_000_000_000)) == rtp)
        #expect(client.sendingKeyPhase == true)
    }

    @Test func sealersOnSeveralThreadsWithStaleClocksRekeyOnceAtTheInterval() throws {
        let (client, relay) = try sessionPair(policy: .init(rekeyAfterPackets: .max, rekeyAfterSeconds: 1))
        // Four threads seal 500 packets each with times from 0.9 s to 1.1 s that each read a
        // little before sealing, as the relay's loops and a batch's one clock reading do.
        let sealed = Mutex<[[UInt8]]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            for index in 0..<500 {
                let now = UInt64(900_000_000 + index * 400_000) - UInt64(thread) * 3_000_000
                let packet = try! client.seal(rtp, now: now)
                sealed.withLock { $0.append(packet) }
            }
        }
        let packets = sealed.withLock { $0 }.sorted { counter(of: $0) < counter(of: $1) }
        var flips = 0
        for (earlier, later) in zip(packets, packets.dropFirst()) where phase(of: earlier) != phase(of: later) { flips += 1 }
        #expect(flips == 1, "the key changed \(flips) times")
        for packet in packets { #expect(try relay.open(packet) == rtp) }
    }

    @Test func losingEveryPacketSealedUnderAKeyDoesNotDeafenTheReceiver() throws {
        let (client, relay) = try sessionPair(policy: .init(rekeyAfterPackets: 5, rekeyAfterSeconds: 3_600))
        let packets = try (0..<40).map { _ in try client.seal(rtp) }
        for packet in packets[0..<5] { #expect(try relay.open(packet) == rtp) }
        // Packets 5–9 (the second key) and 15–29 (the fourth to sixth) are lost.
        for packet in packets[10..<15] + packets[30...] {
            #expect(try relay.open(packet) == rtp, "packet \(counter(of: packet))")
        }
    }

    @Test func aForgedNewestPacketDoesNotMoveTheReceiverAhead() throws {
        let (client, relay) = try sessionPair(policy: .init(rekeyAfterPackets: 5, rekeyAfterSeconds: 3_600))
        let packets = try (0..<8).map { _ in try client.seal(rtp) }
        #expect(try relay.open(packets[0]) == rtp)
        var forged = packets[7]
        forged[forged.count - 1] ^= 1
        #expect(throws: SecurityError.authenticationFailed) { try relay.open(forged) }
        for packet in packets[1..<7] { #expect(try relay.open(packet) == rtp) }
    }

    private func counter(of packet: [UInt8]) -> UInt64 {
        packet.withUnsafeBytes { (try? SealedHeader(parsing: $0))?.counter ?? 0 }
    }

    private func phase(of packet: [UInt8]) -> Bool {
        packet.withUnsafeBytes { (try? SealedHeader(parsing: $0))?.keyPhase ?? false }
    }

    @Test func rekeyIsNoiseRekey() {
        // Rekey(k) = ENCRYPT(k, 2^64-1, "", zeros)[0..<32]: deterministic and one-way.
        let key = SymmetricKey(data: [UInt8](repeating: 7, count: 32))
        let next = SecureSession.rekey(key)
        #expect(next.withUnsafeBytes { Array($0) } == SecureSession.rekey(key).withUnsafeBytes { Array($0) })
        #expect(next.withUnsafeBytes { Array($0) } != key.withUnsafeBytes { Array($0) })
    }
}

@Suite("Replay window (RFC 3711 §3.3.2, RFC 6479)")
struct ReplayWindowTests {
    @Test func agreesWithAReferenceModelOnRandomCounters() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<50 {
            var window = ReplayWindow()
            var seen = Set<UInt64>()
            var highest: UInt64?
            var base: UInt64 = UInt64.random(in: 0...1_000_000, using: &rng)
            for _ in 0..<3_000 {
                base += UInt64.random(in: 0...3, using: &rng)
                let counter = base >= 1_100 ? base - UInt64.random(in: 0...1_100, using: &rng) : UInt64.random(in: 0...base, using: &rng)
                let expected: Bool = {
                    guard let highest else { return true }
                    if counter > highest { return true }
                    if highest - counter >= ReplayWindow.tolerance { return false }
                    return !seen.contains(counter)
                }()
                #expect(window.mayAccept(counter) == expected, "counter \(counter), highest \(String(describing: highest))")
                if expected {
                    window.record(counter)
                    seen.insert(counter)
                    highest = max(highest ?? 0, counter)
                }
            }
        }
    }

    @Test func aJumpFarAheadClearsTheWholeRing() {
        var window = ReplayWindow()
        for counter in UInt64(0)..<100 { window.record(counter) }
        window.record(1_000_000)
        #expect(window.mayAccept(999_999))
        #expect(!window.mayAccept(1_000_000))
        #expect(!window.mayAccept(50))
    }
}

extension Array where Element == UInt8 {
    func contains(subsequence: [UInt8]) -> Bool {
        guard subsequence.count <= count else { return false }
        return (0...(count - subsequence.count)).contains { Array(self[$0..<$0 + subsequence.count]) == subsequence }
    }
}
