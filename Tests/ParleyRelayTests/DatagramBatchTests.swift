import NIOCore
@testable import ParleyRelay
import ParleyDatagrams
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The relay loop's own socket I/O, on real loopback sockets.
@Suite("Batched datagram reads and writes")
struct DatagramBatchTests {
    private static let loopback = try! SocketAddress(ipAddress: "127.0.0.1", port: 0)

    private static func boundSocket() throws -> (CInt, SocketAddress) {
        let descriptor = try RelaySocket.bound(to: loopback, bufferBytes: 256 << 10)
        return (descriptor, try RelaySocket.localAddress(of: descriptor))
    }

    /// Waits up to a second for one datagram.
    private static func receiveOne(_ descriptor: CInt) -> [UInt8]? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, 1000) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 2048)
        let count = recv(descriptor, &buffer, buffer.count, 0)
        return count >= 0 ? Array(buffer.prefix(count)) : nil
    }

    @Test func aRefusedDestinationIsSkippedAndTheRestOfTheBatchIsSent() throws {
        let (sender, _) = try Self.boundSocket()
        let (first, firstAddress) = try Self.boundSocket()
        let (second, secondAddress) = try Self.boundSocket()
        defer { for descriptor in [sender, first, second] { close(descriptor) } }

        let batch = DatagramSendBatch(messageCapacity: 8, largestDatagram: 1500)
        let nowhere = DatagramAddress(storage: sockaddr_in6(), length: 0)  // the kernel refuses it
        for (index, destination) in [DatagramAddress(firstAddress), nowhere, DatagramAddress(secondAddress)].enumerated() {
            let payload = [UInt8](repeating: UInt8(index + 1), count: 100 + index)
            _ = batch.append(to: destination, kind: .media, maximumSize: payload.count) { slot in
                payload.withUnsafeBytes { slot.copyMemory(from: $0) }
                return payload.count
            }
        }
        var sentSizes: [Int] = []
        let outcome = batch.send(on: sender) { _, size in sentSizes.append(size) }
        #expect(outcome.sent == 2 && outcome.failed == 1 && outcome.shed == 0, "\(outcome)")
        #expect(sentSizes == [100, 102])
        #expect(Self.receiveOne(first) == [UInt8](repeating: 1, count: 100))
        #expect(Self.receiveOne(second) == [UInt8](repeating: 3, count: 102))
        #expect(batch.isEmpty)
    }

    /// Copies leave with don't-fragment (no IP identification to draw per copy), and a full-size
    /// voice datagram still goes out and arrives whole.
    @Test func theRelaysSocketSendsWithDontFragmentAndFullSizeDatagramsStillArrive() throws {
        let (sender, _) = try Self.boundSocket()
        let (receiver, receiverAddress) = try Self.boundSocket()
        defer { for descriptor in [sender, receiver] { close(descriptor) } }
        #expect(RelaySocket.ipv4MTUDiscovery(of: sender) == CInt(IP_PMTUDISC_PROBE))

        let batch = DatagramSendBatch(messageCapacity: 8, largestDatagram: 1500)
        let payload = (0..<1_400).map { UInt8(truncatingIfNeeded: $0) }
        _ = batch.append(to: DatagramAddress(receiverAddress), kind: .media, maximumSize: payload.count) { slot in
            payload.withUnsafeBytes { slot.copyMemory(from: $0) }
            return payload.count
        }
        let outcome = batch.send(on: sender) { _, _ in }
        #expect(outcome.sent == 1 && outcome.failed == 0, "\(outcome)")
        #expect(Self.receiveOne(receiver) == payload)
    }

    @Test func aBatchReadGivesEachDatagramItsSourceAndFlagsOneTooLong() throws {
        let (reader, readerAddress) = try Self.boundSocket()
        let (alice, aliceAddress) = try Self.boundSocket()
        let (bob, bobAddress) = try Self.boundSocket()
        defer { for descriptor in [reader, alice, bob] { close(descriptor) } }
        func send(_ bytes: [UInt8], from descriptor: CInt) {
            _ = bytes.withUnsafeBytes { raw in
                readerAddress.withSockAddr { address, length in sendto(descriptor, raw.baseAddress, raw.count, 0, address, socklen_t(length)) }
            }
        }
        send([UInt8](repeating: 0xA1, count: 40), from: alice)
        send([UInt8](repeating: 0xB2, count: 700), from: bob)  // longer than a slot
        send([UInt8](repeating: 0xA3, count: 512), from: alice)  // exactly a slot
        var poller = pollfd(fd: reader, events: Int16(POLLIN), revents: 0)
        #expect(poll(&poller, 1, 1000) == 1)
        usleep(20_000)  // all three queued

        let batch = DatagramReceiveBatch(capacity: 4, slotSize: 512)
        #expect(batch.receive(on: reader) == 3)
        #expect(PeerAddress(batch.source(0)) == PeerAddress(aliceAddress))
        #expect(PeerAddress(batch.source(1)) == PeerAddress(bobAddress))
        #expect(PeerAddress(batch.source(2)) == PeerAddress(aliceAddress))
        #expect(UnsafeRawBufferPointer(batch.bytes(0)).elementsEqual(repeatElement(0xA1, count: 40)))
        #expect(!batch.isTruncated(0) && batch.isTruncated(1) && !batch.isTruncated(2))
        #expect(batch.bytes(2).count == 512)
        #expect(batch.receive(on: reader) == 0, "nothing more is waiting, and the read does not block")
    }
}
