import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A plain UDP forwarder in front of the relay, whose address the clients take for the
/// relay's, so a test can send them datagrams "from the relay": what an attacker who forges
/// the relay's source address (anyone, on the internet) can do. Each client gets an upstream
/// socket of its own, so the relay still sees one address per client. With `capture`, it also
/// keeps every datagram both ways, with when it passed: everything the relay received and
/// sent, for a test to read as the relay (or its network) could.
final class SpoofingFront: @unchecked Sendable {
    // @unchecked: the tables are touched by the forwarding thread and by `inject`, under `lock`.
    private let front: Int32
    let port: Int
    private let relayPort: UInt16
    private let lock = Mutex(())
    private var upstreams: [Int32: sockaddr_in] = [:]      // upstream socket → client address
    private var byClient: [UInt64: Int32] = [:]            // client address → upstream socket
    private let stopFlag = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)
    private let capturing: Bool
    private var kept: [(toRelay: Bool, nanoseconds: UInt64, bytes: [UInt8])] = []

    init(relayPort: Int, capture: Bool = false) {
        self.relayPort = UInt16(relayPort)
        capturing = capture
        let front = Self.boundSocket()
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(front, $0, &length) }
        }
        self.front = front
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [self] in run() }
    }

    /// Sends `bytes` to every client seen so far, from the address they take for the relay's.
    func inject(_ bytes: [UInt8]) {
        let clients = lock.withLock { _ in Array(upstreams.values) }
        for client in clients { send(bytes, on: front, to: client) }
    }

    var clientCount: Int { lock.withLock { _ in upstreams.count } }

    /// Every datagram that passed, in order (with `capture`).
    var captured: [(toRelay: Bool, nanoseconds: UInt64, bytes: [UInt8])] { lock.withLock { _ in kept } }

    func stop() {
        guard !stopFlag.exchange(true, ordering: .relaxed) else { return }
        done.wait()
        close(front)
        lock.withLock { _ in for socket in upstreams.keys { close(socket) } }
    }

    private func run() {
        var buffer = [UInt8](repeating: 0, count: 2048)
        while !stopFlag.load(ordering: .relaxed) {
            let sockets = [front] + lock.withLock { _ in Array(upstreams.keys) }
            var pollers = sockets.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            guard poll(&pollers, nfds_t(pollers.count), 20) > 0 else { continue }
            for poller in pollers where poller.revents & Int16(POLLIN) != 0 {
                var source = sockaddr_in()
                var length = socklen_t(MemoryLayout<sockaddr_in>.size)
                let count = buffer.withUnsafeMutableBytes { raw in
                    withUnsafeMutablePointer(to: &source) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(poller.fd, raw.baseAddress, raw.count, 0, $0, &length) }
                    }
                }
                guard count > 0 else { continue }
                let datagram = Array(buffer[..<count])
                if capturing {
                    var now = timespec()
                    clock_gettime(CLOCK_MONOTONIC, &now)
                    let nanoseconds = UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
                    lock.withLock { _ in kept.append((poller.fd == front, nanoseconds, datagram)) }
                }
                if poller.fd == front {
                    send(datagram, on: upstream(for: source), to: Self.loopback(port: relayPort))
                } else if let client = lock.withLock({ _ in upstreams[poller.fd] }) {
                    send(datagram, on: front, to: client)
                }
            }
        }
        done.signal()
    }

    private func upstream(for client: sockaddr_in) -> Int32 {
        let key = UInt64(client.sin_addr.s_addr) << 16 | UInt64(client.sin_port)
        return lock.withLock { _ in
            if let socket = byClient[key] { return socket }
            let socket = Self.boundSocket()
            byClient[key] = socket
            upstreams[socket] = client
            return socket
        }
    }

    private func send(_ bytes: [UInt8], on socket: Int32, to destination: sockaddr_in) {
        var destination = destination
        _ = bytes.withUnsafeBytes { raw in
            withUnsafePointer(to: &destination) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(socket, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        return address
    }

    private static func boundSocket() -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        precondition(descriptor >= 0, "socket() failed: \(errno)")
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        precondition(bound == 0, "bind() failed: \(errno)")
        return descriptor
    }
}
