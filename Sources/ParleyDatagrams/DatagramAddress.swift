import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A UDP peer's socket address as the kernel reads and writes it: copied out of a received
/// datagram's header, and into a sent one's, with no conversion on the way.
struct DatagramAddress: Sendable {
    /// Large enough for `sockaddr_in` and `sockaddr_in6`; only `length` bytes are meaningful.
    let storage: sockaddr_in6
    let length: socklen_t

    /// A Unix-domain address (which a UDP relay never hears from) gets length 0: the kernel
    /// refuses sends to it, and they are counted as failed.
    init(_ address: SocketAddress) {
        var storage = sockaddr_in6()
        let length = address.withSockAddr { pointer, size -> Int in
            guard size <= MemoryLayout<sockaddr_in6>.size else { return 0 }
            withUnsafeMutableBytes(of: &storage) { $0.baseAddress!.copyMemory(from: pointer, byteCount: size) }
            return size
        }
        self.storage = storage
        self.length = socklen_t(length)
    }

    init(storage: sockaddr_in6, length: socklen_t) {
        self.storage = storage
        self.length = length
    }

    var family: sa_family_t { storage.sin6_family }

    /// For people and the public API; built only off the forwarding path.
    var socketAddress: SocketAddress? {
        var copy = storage
        switch Int32(family) {
        case AF_INET where length >= MemoryLayout<sockaddr_in>.size:
            let v4 = withUnsafeBytes(of: &copy) { $0.loadUnaligned(as: sockaddr_in.self) }
            return SocketAddress(v4)
        case AF_INET6 where length >= MemoryLayout<sockaddr_in6>.size:
            return SocketAddress(copy)
        default:
            return nil
        }
    }
}
