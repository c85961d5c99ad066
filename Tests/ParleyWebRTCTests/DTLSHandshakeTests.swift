import Foundation
import ParleyBasics
import ParleyWire
import Testing
@testable import ParleyWebRTC

/// DTLS-SRTP between two connections in one process (the relay's server side against an
/// OpenSSL client standing in for the browser), datagrams handed across by the test.
@Suite("DTLS handshakes")
struct DTLSHandshakeTests {
    /// Passes datagrams both ways until neither side has any; `lose` drops some on the way.
    static func pump(_ client: DTLSConnection, _ server: DTLSConnection, rounds: Int = 20,
                     lose: (_ toServer: Bool, _ index: Int) -> Bool = { _, _ in false }) {
        var index = 0
        for _ in 0..<rounds {
            let toServer = client.takeDatagrams()
            let toClient = server.takeDatagrams()
            if toServer.isEmpty && toClient.isEmpty { return }
            for datagram in toServer {
                index += 1
                if !lose(true, index) { datagram.withUnsafeBytes { _ = server.receive($0) } }
            }
            for datagram in toClient {
                index += 1
                if !lose(false, index) { datagram.withUnsafeBytes { _ = client.receive($0) } }
            }
        }
    }

    static func pair() throws -> (client: DTLSConnection, server: DTLSConnection, clientContext: DTLSContext, serverContext: DTLSContext) {
        let serverContext = try DTLSContext()
        let clientContext = try DTLSContext()
        let server = try DTLSConnection(context: serverContext, isServer: true, peerFingerprint: clientContext.fingerprint)
        let client = try DTLSConnection(context: clientContext, isServer: false, peerFingerprint: serverContext.fingerprint)
        return (client, server, clientContext, serverContext)
    }

    @Test func bothSidesAgreeOnSRTPKeysAfterTheHandshake() throws {
        let (client, server, _, _) = try Self.pair()
        client.start()
        Self.pump(client, server)
        #expect(client.state == .established)
        #expect(server.state == .established)
        let clientKeys = try #require(client.srtpKeys())
        let serverKeys = try #require(server.srtpKeys())
        #expect(clientKeys == serverKeys)
        #expect(clientKeys.profile == .aeadAES128GCM, "GCM is offered first")
        #expect(clientKeys.client != clientKeys.server)
        #expect(clientKeys.client.count == 16 + 12)
        // Every datagram stays under the MTU it was given.
        #expect(server.takeDatagrams().allSatisfy { $0.count <= Int(DTLSConnection.maximumDatagramSize) })
    }

    /// RFC 6347's cookie exchange, as the relay runs it: the first ClientHello gets a
    /// HelloVerifyRequest (smaller than itself) and nothing is kept; the hello that carries
    /// the cookie goes on, on a fresh connection, only from the address the cookie was made for.
    @Test func aServerAsksForACookieAndGoesOnOnlyWithTheOneForThatAddress() throws {
        let serverContext = try DTLSContext()
        let clientContext = try DTLSContext()
        func server() throws -> DTLSConnection {
            try DTLSConnection(context: serverContext, isServer: true, peerFingerprint: clientContext.fingerprint)
        }
        let client = try DTLSConnection(context: clientContext, isServer: false, peerFingerprint: serverContext.fingerprint)
        client.start()
        let hello = try #require(client.takeDatagrams().first)
        let address: [UInt8] = [127, 0, 0, 1, 0x1F, 0x90]
        let first = try server()
        #expect(hello.withUnsafeBytes { first.listen($0, peer: address) } == .cookieRequested)
        let verifyRequest = first.takeDatagrams()
        #expect(verifyRequest.count == 1)
        #expect(verifyRequest.allSatisfy { $0.count < hello.count }, "the answer is larger than the hello")
        verifyRequest.first?.withUnsafeBytes { _ = client.receive($0) }
        let secondHello = try #require(client.takeDatagrams().first)
        #expect(secondHello.withUnsafeBytes { try! server().listen($0, peer: [10, 0, 0, 1, 0x1F, 0x90]) } == .cookieRequested,
                "a cookie made for one address was taken from another")
        #expect([UInt8](repeating: 22, count: 40).withUnsafeBytes { try! server().listen($0, peer: address) } != .verified)
        let verified = try server()
        #expect(secondHello.withUnsafeBytes { verified.listen($0, peer: address) } == .verified)
        verified.start()
        Self.pump(client, verified)
        #expect(client.state == .established)
        #expect(verified.state == .established)
        #expect(client.srtpKeys() != nil && client.srtpKeys() == verified.srtpKeys())
    }

    @Test func aCertificateWithAnotherFingerprintFailsTheHandshake() throws {
        let serverContext = try DTLSContext()
        let clientContext = try DTLSContext()
        let stranger = try DTLSContext()
        let server = try DTLSConnection(context: serverContext, isServer: true, peerFingerprint: stranger.fingerprint)
        let client = try DTLSConnection(context: clientContext, isServer: false, peerFingerprint: serverContext.fingerprint)
        client.start()
        Self.pump(client, server)
        #expect(server.state == .failed)
        #expect(server.srtpKeys() == nil)
        #expect(client.state != .established)
    }

    @Test func aLostFlightIsSentAgainWhenItsTimerFires() throws {
        let (client, server, _, _) = try Self.pair()
        client.start()
        // The server's first flight is lost on its way.
        Self.pump(client, server, rounds: 2, lose: { toServer, _ in !toServer })
        #expect(server.state == .handshaking)
        let delay = try #require(server.retransmissionDelayMilliseconds)
        #expect(delay <= 1_000)
        Thread.sleep(forTimeInterval: Double(delay) / 1_000 + 0.05)
        server.handleTimeout()
        Self.pump(client, server)
        #expect(client.state == .established && server.state == .established)
    }

    @Test func closeNotifyEndsTheAssociation() throws {
        let (client, server, _, _) = try Self.pair()
        client.start()
        Self.pump(client, server)
        client.shutdown()
        Self.pump(client, server)
        #expect(server.state == .closed)
    }

    /// Hostile datagrams at a server mid-handshake and after it: nothing traps, and the
    /// real handshake still completes.
    @Test func hostileDatagramsCrashNothingAndDoNotStopTheHandshake() throws {
        var random = SplitMix64(seed: 0x4454_4C53)
        let (client, server, _, _) = try Self.pair()
        let lone = try DTLSConnection(context: DTLSContext(), isServer: true, peerFingerprint: CertificateFingerprint(algorithm: "sha-256", bytes: Array(repeating: 1, count: 32)))
        client.start()
        let hello = client.takeDatagrams()
        for round in 0..<2_000 {
            var bytes: [UInt8]
            if round % 2 == 0, let first = hello.first {
                bytes = first
                for _ in 0..<Int.random(in: 1...6, using: &random) { bytes[Int.random(in: 0..<bytes.count, using: &random)] ^= UInt8.random(in: 1...255, using: &random) }
                bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &random)))
            } else {
                bytes = (0..<Int.random(in: 0...300, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                if !bytes.isEmpty { bytes[0] = UInt8.random(in: 20...63, using: &random) }
            }
            bytes.withUnsafeBytes { _ = lone.receive($0) }
            _ = lone.takeDatagrams()
        }
        for datagram in hello { datagram.withUnsafeBytes { _ = server.receive($0) } }
        Self.pump(client, server)
        #expect(server.state == .established)
    }
}
