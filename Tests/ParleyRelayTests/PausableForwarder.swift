import Foundation
import ParleyRelayTestSupport
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A UDP path between one relay and another that a test can cut and restore: datagrams from
/// whoever sends to `address` go on to `destination` from a socket of its own, and answers come
/// back the same way. While paused, everything is dropped both ways, as a link that went down.
final class PausableForwarder: @unchecked Sendable {
    // @unchecked: the sockets are read and written by the forwarding thread only, after init.
    let address: (host: String, port: Int)
    private let front: Int32
    private let back: Int32
    private let paused = Atomic<Bool>(false)
    private let running = Atomic<Bool>(true)
    private let finished = DispatchSemaphore(value: 0)

    init(host: String, to destination: (host: String, port: Int)) throws {
        let (front, back) = (try Self.socket(bound: host), try Self.socket(bound: host))
        var target = Self.socketAddress(destination.host, destination.port)
        let connected = withUnsafePointer(to: &target) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(back, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw TestFailure("cannot connect the forwarder to \(destination)") }
        (self.front, self.back) = (front, back)
        address = (host, Self.port(of: front))
        Thread.detachNewThread { [self] in forward() }
    }

    func pause() { paused.store(true, ordering: .relaxed) }
    func resume() { paused.store(false, ordering: .relaxed) }

    func stop() {
        guard running.exchange(false, ordering: .relaxed) else { return }
        finished.wait()
        close(front)
        close(back)
    }

    deinit { stop() }

    private func forward() {
        var sender = sockaddr_in()
        var haveSender = false
        var buffer = [UInt8](repeating: 0, count: 2048)
        var sockets = [pollfd(fd: front, events: Int16(POLLIN), revents: 0), pollfd(fd: back, events: Int16(POLLIN), revents: 0)]
        while running.load(ordering: .relaxed) {
            guard poll(&sockets, 2, 20) > 0 else { continue }
            if sockets[0].revents & Int16(POLLIN) != 0 {
                var length = socklen_t(MemoryLayout<sockaddr_in>.size)
                let count = withUnsafeMutablePointer(to: &sender) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(front, &buffer, buffer.count, 0, $0, &length) }
                }
                if count > 0 {
                    haveSender = true
                    if !paused.load(ordering: .relaxed) { _ = send(back, buffer, count, 0) }
                }
            }
            if sockets[1].revents & Int16(POLLIN) != 0 {
                let count = recv(back, &buffer, buffer.count, 0)
                if count > 0, haveSender, !paused.load(ordering: .relaxed) {
                    _ = withUnsafePointer(to: &sender) { pointer in
                        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                            sendto(front, buffer, count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                        }
                    }
                }
            }
        }
        finished.signal()
    }

    private static func socket(bound host: String) throws -> Int32 {
        let descriptor = Glibc.socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var address = socketAddress(host, 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard descriptor >= 0, bound == 0 else { throw TestFailure("cannot bind a forwarder socket on \(host)") }
        return descriptor
    }

    private static func socketAddress(_ host: String, _ port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr(host)
        return address
    }

    private static func port(of descriptor: Int32) -> Int {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
