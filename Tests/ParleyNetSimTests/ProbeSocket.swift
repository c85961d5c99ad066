import Foundation
import NIOCore
import ParleyWire

/// One probe packet as it was received: which stream (the RTP SSRC) and packet (sequence
/// number), when it was sent (carried in the payload) and when it arrived, and from where.
struct ProbeArrival: Sendable {
    let ssrc: UInt32
    let sequenceNumber: UInt16
    let sentAt: UInt64
    let arrivedAt: UInt64
    let from: SocketAddress

    var delayMilliseconds: Double { Double(Int64(arrivedAt) - Int64(sentAt)) / 1e6 }
}

/// A UDP socket on 127.0.0.1 that sends paced streams of probe packets and records every
/// probe it receives. Probes are RTP packets like a voice client's (112 bytes: Opus payload
/// type, sequence number, SSRC), whose payload starts with the send time in nanoseconds of
/// the monotonic clock, so the receiver measures each packet's one-way delay itself.
///
/// The test's side of the measurement is kept out of the way of the proxy it measures:
/// plain blocking system calls on threads of its own (a receiver that wakes the moment a
/// datagram lands, a pacer per stream set), not an event loop, so that in a debug build on
/// a busy machine it costs little and does not add its own scheduling delays; and 4 MiB
/// socket buffers, so a stall of the machine delays packets rather than losing them.
final class ProbeSocket: @unchecked Sendable {
    let address: SocketAddress
    private let descriptor: Int32
    private let keepingRawDatagrams: Bool
    private let lock = NSLock()
    private var received: [ProbeArrival] = []
    private var sources: [UInt32: SocketAddress] = [:]
    private var raw: [(from: SocketAddress, bytes: [UInt8])] = []
    private var isClosing = false
    private let receiverStopped = DispatchSemaphore(value: 0)

    static let payloadSize = 100
    static let bufferBytes: Int32 = 4 << 20

    enum Destination: Sendable {
        case address(SocketAddress)
        /// Back to wherever this socket received stream `ssrc` from, as a relay replies.
        case sourceOf(ssrc: UInt32)
    }

    struct SocketError: Error, CustomStringConvertible {
        let description: String
        init(_ call: String) { description = "\(call): \(String(cString: strerror(errno)))" }
    }

    /// Binds a probe socket to 127.0.0.1 on a free port; with `keepingRawDatagrams`, it also
    /// keeps every datagram's bytes, probe or not.
    static func bind(keepingRawDatagrams: Bool = false) async throws -> ProbeSocket {
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard descriptor >= 0 else { throw SocketError("socket") }
        var size = bufferBytes
        setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        // The receiver wakes at least every 50 ms to see whether it should stop.
        var timeout = timeval(tv_sec: 0, tv_usec: 50_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var local = sockaddr_in.loopback(port: 0)
        let bound = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            Glibc.close(descriptor)
            throw SocketError("bind")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        let socket = ProbeSocket(
            descriptor: descriptor, address: try SocketAddress(ipAddress: "127.0.0.1", port: Int(UInt16(bigEndian: local.sin_port))),
            keepingRawDatagrams: keepingRawDatagrams)
        Thread.detachNewThread { socket.receive() }
        return socket
    }

    private init(descriptor: Int32, address: SocketAddress, keepingRawDatagrams: Bool) {
        self.descriptor = descriptor
        self.address = address
        self.keepingRawDatagrams = keepingRawDatagrams
    }

    /// Every probe received so far.
    func arrivals() async throws -> [ProbeArrival] {
        lock.withLock { received }
    }

    /// Every datagram received, with its sender, if the socket keeps them.
    func rawDatagrams() async throws -> [(from: SocketAddress, bytes: [UInt8])] {
        lock.withLock { raw }
    }

    /// The address a stream's probes came from, once one has arrived.
    func source(of ssrc: UInt32) async throws -> SocketAddress? {
        lock.withLock { sources[ssrc] }
    }

    /// Sends `count` probes of each stream (an SSRC and where its probes go) at `rate` a
    /// second, all from this socket, on a thread of their own; a stream starts once its
    /// destination is known. Returns when the last probe has been sent. Each probe carries
    /// the time it was actually sent, so pacing jitter does not affect the delays measured.
    func sendStreams(_ streams: [(ssrc: UInt32, to: Destination)], count: Int, rate: Double) async throws {
        try await withCheckedThrowingContinuation { (done: CheckedContinuation<Void, any Error>) in
            Thread.detachNewThread {
                do {
                    try self.pace(streams, count: count, rate: rate)
                    done.resume()
                } catch {
                    done.resume(throwing: error)
                }
            }
        }
    }

    private func pace(_ streams: [(ssrc: UInt32, to: Destination)], count: Int, rate: Double) throws {
        var starts = [UInt64?](repeating: nil, count: streams.count)
        var sent = [Int](repeating: 0, count: streams.count)
        let deadline = Self.now() + 120_000_000_000
        while sent.contains(where: { $0 < count }) {
            guard Self.now() < deadline else { throw SocketError("pacing: a destination never became known") }
            for (index, stream) in streams.enumerated() where sent[index] < count {
                let target: SocketAddress
                switch stream.to {
                case .address(let address): target = address
                case .sourceOf(let source):
                    guard let address = lock.withLock({ sources[source] }) else { continue }
                    target = address
                }
                let now = Self.now()
                let start = starts[index] ?? now
                starts[index] = start
                let due = min(count, Int(Double(now - start) * rate / 1e9) + 1)
                while sent[index] < due {
                    try sendDatagram(Self.probe(ssrc: stream.ssrc, sequence: UInt16(truncatingIfNeeded: sent[index])), to: target)
                    sent[index] += 1
                }
            }
            usleep(1_000)
        }
    }

    func send(_ bytes: [UInt8], to destination: SocketAddress) async throws {
        try sendDatagram(bytes, to: destination)
    }

    private func sendDatagram(_ bytes: [UInt8], to destination: SocketAddress) throws {
        var target = sockaddr_in.loopback(port: destination.port ?? 0)
        let result = bytes.withUnsafeBytes { payload in
            withUnsafePointer(to: &target) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(descriptor, payload.baseAddress, payload.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        guard result >= 0 else { throw SocketError("sendto") }
    }

    func close() async throws {
        lock.withLock { isClosing = true }
        receiverStopped.wait()
        Glibc.close(descriptor)
    }

    private func receive() {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var from = sockaddr_in()
        while !lock.withLock({ isClosing }) {
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let count = buffer.withUnsafeMutableBytes { bytes in
                withUnsafeMutablePointer(to: &from) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        recvfrom(descriptor, bytes.baseAddress, bytes.count, 0, $0, &length)
                    }
                }
            }
            guard count >= 0 else { continue }  // the 50 ms timeout, or an ICMP error: look again
            let arrivedAt = Self.now()
            let sender = try! SocketAddress(ipAddress: "127.0.0.1", port: Int(UInt16(bigEndian: from.sin_port)))
            let datagram = Array(buffer[0..<count])
            let probe: (UInt32, UInt16, UInt64)? = datagram.withUnsafeBytes { raw in
                guard let view = try? RTPPacketView(parsing: raw), view.payload.count >= 8 else { return nil }
                return (view.ssrc, view.sequenceNumber, UInt64(bigEndian: view.payload.loadUnaligned(as: UInt64.self)))
            }
            lock.withLock {
                if keepingRawDatagrams { raw.append((sender, datagram)) }
                if let (ssrc, sequence, sentAt) = probe {
                    sources[ssrc] = sources[ssrc] ?? sender
                    received.append(ProbeArrival(ssrc: ssrc, sequenceNumber: sequence, sentAt: sentAt, arrivedAt: arrivedAt, from: sender))
                }
            }
        }
        receiverStopped.signal()
    }

    /// CLOCK_MONOTONIC in nanoseconds: the clock both ends of a probe read.
    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    private static func probe(ssrc: UInt32, sequence: UInt16) -> [UInt8] {
        var payload = [UInt8](repeating: 0, count: payloadSize)
        withUnsafeBytes(of: now().bigEndian) { payload.replaceSubrange(0..<8, with: $0) }
        let header = RTPHeader(
            payloadType: RTPHeader.opusPayloadType, sequenceNumber: sequence, timestamp: UInt32(sequence) * 960, ssrc: ssrc)
        return try! header.serialized(payload: payload)
    }
}

extension sockaddr_in {
    static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }
}
