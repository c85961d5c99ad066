import Glibc
import NIOCore
import ParleyBasics
import ParleySecurity
import ParleyWire
import Testing
@testable import ParleyClient

/// The capture thread's way out (``MediaSender``: the link's session and the relay's address
/// as copies it refreshes, a seal into its own buffer, one `sendto` on a real UDP socket) and
/// the figures it reports without a lock (``SentMedia``).
@Suite("The media path's sender and gate")
struct MediaPathTests {
    /// A UDP socket on 127.0.0.1 that stands for the relay, with a receive timeout.
    final class LoopbackSocket {
        let descriptor: CInt
        let address: SocketAddress

        init() throws {
            let descriptor = socket(AF_INET, CInt(SOCK_DGRAM.rawValue), 0)
            let any = try SocketAddress(ipAddress: "127.0.0.1", port: 0)
            _ = any.withSockAddr { bind(descriptor, $0, socklen_t($1)) }
            var timeout = timeval(tv_sec: 0, tv_usec: 300_000)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var storage = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
            self.descriptor = descriptor
            address = try SocketAddress(ipAddress: "127.0.0.1", port: Int(UInt16(bigEndian: storage.sin_port)))
        }

        deinit { close(descriptor) }

        /// The next datagram, or nil after the timeout.
        func receive() -> [UInt8]? {
            var buffer = [UInt8](repeating: 0, count: 2_048)
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            return count >= 0 ? Array(buffer.prefix(count)) : nil
        }
    }

    static let packet: [UInt8] = [0x80, 0x6F, 0x00, 0x01] + [UInt8](repeating: 0x5A, count: 40)

    @Test func aSecureLinksMediaIsSealedWithTheLinksSessionAndItsTagRemembered() throws {
        var harness = LinkHarness()
        try harness.join()
        let relay = try LoopbackSocket()
        let client = try LoopbackSocket()
        let sender = MediaSender(
            destinations: VersionedValue<MediaDestination?>(MediaDestination(socket: client.descriptor, address: relay.address)),
            sealer: MediaSealer(protector: harness.link.protector))
        #expect(Self.packet.withUnsafeBytes { sender.send($0) })
        let sealed = try #require(relay.receive(), "the packet reached the relay's socket")
        let relaySession = try #require(harness.relay.session)
        var opened = [UInt8](repeating: 0, count: sealed.count)
        let count = try sealed.withUnsafeBytes { raw in try opened.withUnsafeMutableBytes { try relaySession.open(raw, into: $0) } }
        #expect(Array(opened.prefix(count)) == Self.packet, "the relay opens exactly what was sent")
        #expect(harness.link.protector.sealedRecently(tag: Array(sealed.suffix(SealedHeader.tagSize))),
                "a relay's \"not joined\" echoing this packet's tag is ours to believe")
    }

    @Test func nothingLeavesASecureLinkWithoutASessionAndATagOfAnEarlierSessionNoLongerCounts() throws {
        var harness = LinkHarness()
        try harness.join()
        let relay = try LoopbackSocket()
        let client = try LoopbackSocket()
        let protector = harness.link.protector
        let sender = MediaSender(
            destinations: VersionedValue<MediaDestination?>(MediaDestination(socket: client.descriptor, address: relay.address)), sealer: MediaSealer(protector: protector))
        #expect(Self.packet.withUnsafeBytes { sender.send($0) })
        let sealed = try #require(relay.receive())
        // The link lost its session (reconnecting): the sender sees it at its next packet.
        let session = protector.session
        protector.set(nil)
        #expect(!Self.packet.withUnsafeBytes { sender.send($0) }, "no session, nothing sent")
        #expect(relay.receive() == nil, "and nothing reached the relay")
        protector.set(session)
        #expect(!protector.sealedRecently(tag: Array(sealed.suffix(SealedHeader.tagSize))),
                "a tag sealed before the session was replaced does not count")
    }

    @Test func withInsecureThePacketGoesAsItIsAndWithoutADestinationNotAtAll() throws {
        let relay = try LoopbackSocket()
        let client = try LoopbackSocket()
        let destinations = VersionedValue<MediaDestination?>(nil)
        let sender = MediaSender(destinations: destinations, sealer: nil)
        #expect(!Self.packet.withUnsafeBytes { sender.send($0) }, "before the connection is up nothing goes")
        destinations.update { $0 = MediaDestination(socket: client.descriptor, address: relay.address) }
        #expect(Self.packet.withUnsafeBytes { sender.send($0) })
        #expect(relay.receive() == Self.packet)
    }

    @Test func aReadersCopyIsRefreshedOnlyWhenTheValueChanged() {
        let value = VersionedValue(1)
        var copy = VersionedValue<Int>.Copy(placeholder: 0)
        #expect(value.refresh(&copy) && copy.value == 1, "the first refresh takes the value")
        #expect(!value.refresh(&copy), "unchanged: nothing to take")
        value.update { $0 = 2 }
        #expect(value.refresh(&copy) && copy.value == 2)
    }

    @Test func theSenderReportsFiguresComeBackAsTheyWereWritten() {
        let sent = SentMedia()
        #expect(sent.sender == nil, "nothing sent yet")
        let state = RTCPReporter.SenderState(packetCount: 4_000_000_001, octetCount: 3_999_999_999, timestamp: 0xFFFF_FFF0, capturedAt: 123_456_789_012)
        sent.record(state)
        #expect(sent.sender == state)
    }
}
