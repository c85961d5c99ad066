import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A TCP path to the store that a test can make go silent the way a NAT or firewall that
/// forgot a connection does: `freezeWatches()` stops carrying bytes on the watch connections
/// open at that moment (those whose first request is a `/v3/watch`), in both directions,
/// without closing them. Every other connection, and every one opened later, is carried.
final class FreezableStorePath: @unchecked Sendable {
    // @unchecked: the listening socket is used by the accepting thread only; shared state is
    // in Mutex/Atomic.
    let port: Int
    private let listener: Int32
    private let running = Atomic<Bool>(true)
    private struct Connection {
        let client: Int32
        let store: Int32
        var isWatch = false
        var frozen = false
    }
    private let connections = Mutex<[Int: Connection]>([:])
    private let nextID = Atomic<Int>(0)

    init(to storePort: Int) throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(descriptor, 16) == 0 else {
            close(descriptor)
            throw EtcdServer.Missing(description: "cannot listen for the store path")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        listener = descriptor
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [self] in accept(storePort: storePort) }
    }

    var url: String { "http://127.0.0.1:\(port)" }

    /// The watch connections open now carry nothing more, either way; they stay open.
    func freezeWatches() -> Int {
        connections.withLock { all in
            var count = 0
            for id in all.keys where all[id]!.isWatch {
                all[id]!.frozen = true
                count += 1
            }
            return count
        }
    }

    func stop() {
        guard running.exchange(false, ordering: .relaxed) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        connections.withLock { all in
            for connection in all.values {
                shutdown(connection.client, Int32(SHUT_RDWR))
                shutdown(connection.store, Int32(SHUT_RDWR))
            }
        }
    }

    deinit { stop() }

    private func accept(storePort: Int) {
        while running.load(ordering: .relaxed) {
            let client = Glibc.accept(listener, nil, nil)
            guard client >= 0 else { continue }
            let store = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = Self.loopback(port: storePort)
            let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(store, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            guard connected == 0 else {
                close(client)
                close(store)
                continue
            }
            let id = nextID.add(1, ordering: .relaxed).newValue
            connections.withLock { $0[id] = Connection(client: client, store: store) }
            Thread.detachNewThread { [self] in pump(id: id, from: client, to: store, sniff: true) }
            Thread.detachNewThread { [self] in pump(id: id, from: store, to: client, sniff: false) }
        }
    }

    /// Carries bytes one way until either side closes; bytes read while frozen are dropped.
    private func pump(id: Int, from source: Int32, to destination: Int32, sniff: Bool) {
        var buffer = [UInt8](repeating: 0, count: 16_384)
        var first = sniff
        while true {
            let count = recv(source, &buffer, buffer.count, 0)
            guard count > 0 else { break }
            let frozen = connections.withLock { all -> Bool in
                if first, String(decoding: buffer[..<count], as: UTF8.self).contains("/v3/watch") { all[id]?.isWatch = true }
                return all[id]?.frozen ?? true
            }
            first = false
            if frozen { continue }
            var sent = 0
            while sent < count {
                let written = buffer[sent..<count].withUnsafeBytes { send(destination, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                guard written > 0 else { break }
                sent += written
            }
        }
        shutdown(destination, Int32(SHUT_WR))
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }
}
