import Foundation
import ParleyRelayTestSupport
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Many sources on one machine: UDP sockets bound to distinct loopback addresses
/// (127.0.0.0/8 is all local on Linux), optionally several ports each, for floods that come
/// from thousands of addresses or from one host's many ports.
final class LoopbackCrowd: @unchecked Sendable {
    // @unchecked: `sockets` is written once in init; `flood` runs on one thread at a time.
    let sockets: [Int32]
    let relayPort: UInt16
    private let stopFlag = Atomic<Bool>(false)
    private let flooding = Atomic<Bool>(false)
    private let sentCount = Atomic<Int>(0)
    private let done = DispatchSemaphore(value: 0)

    /// `hosts` addresses 127.`network`.x.y, `portsPerHost` sockets each.
    init(relayPort: Int, network: UInt8, hosts: Int, portsPerHost: Int = 1) {
        self.relayPort = UInt16(relayPort)
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        limit.rlim_cur = limit.rlim_max
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        var sockets: [Int32] = []
        for host in 0..<hosts {
            for _ in 0..<portsPerHost {
                let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
                precondition(descriptor >= 0, "socket() failed: \(errno)")
                var address = sockaddr_in()
                address.sin_family = sa_family_t(AF_INET)
                address.sin_addr.s_addr = inet_addr("127.\(network).\((host + 1) / 250).\((host + 1) % 250 + 1)")
                let bound = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
                precondition(bound == 0, "bind() failed: \(errno)")
                sockets.append(descriptor)
            }
        }
        self.sockets = sockets
    }

    deinit {
        stop()
        for descriptor in sockets { close(descriptor) }
    }

    func send(_ bytes: [UInt8], from index: Int) {
        sendLoopback(bytes, from: sockets[index], toPort: relayPort)
    }

    /// One datagram from socket `index`, or nil after `timeout` seconds.
    func receive(on index: Int, timeout: Double) -> [UInt8]? {
        var poller = pollfd(fd: sockets[index], events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, Int32(timeout * 1000)) > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 2048)
        let count = buffer.withUnsafeMutableBytes { recv(sockets[index], $0.baseAddress, $0.count, 0) }
        return count >= 0 ? Array(buffer[..<count]) : nil
    }

    /// Starts sending `datagram(i)` from socket `i % count`, round robin, at `perSecond`, on a
    /// thread of its own until ``stop()``.
    func flood(perSecond: Int, datagram: @escaping @Sendable (Int) -> [UInt8]) {
        stopFlag.store(false, ordering: .relaxed)
        flooding.store(true, ordering: .relaxed)
        Thread.detachNewThread { [self] in
            let start = now()
            var index = 0
            while !stopFlag.load(ordering: .relaxed) {
                let due = Int((now() - start) * Double(perSecond))
                if index >= due {
                    usleep(200)
                    continue
                }
                send(datagram(index), from: index % sockets.count)
                index += 1
                sentCount.store(index, ordering: .relaxed)
            }
            done.signal()
        }
    }

    /// Stops a flood and waits for its thread.
    func stop() {
        guard flooding.exchange(false, ordering: .relaxed) else { return }
        stopFlag.store(true, ordering: .relaxed)
        done.wait()
    }

    var sent: Int { sentCount.load(ordering: .relaxed) }
}
