import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A UDP peer's socket address as the kernel reads and writes it: copied out of a received
/// datagram's header, and into a sent one's, with no conversion on the way.
public struct DatagramAddress: Sendable {
    /// Large enough for `sockaddr_in` and `sockaddr_in6`; only `length` bytes are meaningful.
    public let storage: sockaddr_in6
    public let length: socklen_t

    /// A Unix-domain address (which a UDP relay never hears from) gets length 0: the kernel
    /// refuses sends to it, and they are counted as failed.
    public init(_ address: SocketAddress) {
        var storage = sockaddr_in6()
        let length = address.withSockAddr { pointer, size -> Int in
            guard size <= MemoryLayout<sockaddr_in6>.size else { return 0 }
            withUnsafeMutableBytes(of: &storage) { $0.baseAddress!.copyMemory(from: pointer, byteCount: size) }
            return size
        }
        self.storage = storage
        self.length = socklen_t(length)
    }

    @inlinable
    public init(storage: sockaddr_in6, length: socklen_t) {
        self.storage = storage
        self.length = length
    }

    @inlinable
    public var family: sa_family_t { storage.sin6_family }

    /// Whether both name the same host and port: compared field by field as the kernel wrote
    /// them (for IPv6 the scope too), without building a `SocketAddress`.
    public func isSameEndpoint(as other: DatagramAddress) -> Bool {
        guard family == other.family else { return false }
        // sockaddr_in: port at 2, address at 4 (4 bytes); sockaddr_in6: port at 2, address
        // at 8 (16 bytes), scope at 24 (4 bytes).
        switch Int32(family) {
        case AF_INET where length >= MemoryLayout<sockaddr_in>.size && other.length >= MemoryLayout<sockaddr_in>.size:
            return withUnsafeBytes(of: storage) { mine in
                withUnsafeBytes(of: other.storage) { theirs in
                    mine.loadUnaligned(fromByteOffset: 2, as: UInt16.self) == theirs.loadUnaligned(fromByteOffset: 2, as: UInt16.self)
                        && mine.loadUnaligned(fromByteOffset: 4, as: UInt32.self) == theirs.loadUnaligned(fromByteOffset: 4, as: UInt32.self)
                }
            }
        case AF_INET6 where length >= MemoryLayout<sockaddr_in6>.size && other.length >= MemoryLayout<sockaddr_in6>.size:
            return withUnsafeBytes(of: storage) { mine in
                withUnsafeBytes(of: other.storage) { theirs in
                    mine.loadUnaligned(fromByteOffset: 2, as: UInt16.self) == theirs.loadUnaligned(fromByteOffset: 2, as: UInt16.self)
                        && mine.loadUnaligned(fromByteOffset: 8, as: UInt64.self) == theirs.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
                        && mine.loadUnaligned(fromByteOffset: 16, as: UInt64.self) == theirs.loadUnaligned(fromByteOffset: 16, as: UInt64.self)
                        && mine.loadUnaligned(fromByteOffset: 24, as: UInt32.self) == theirs.loadUnaligned(fromByteOffset: 24, as: UInt32.self)
                }
            }
        default:
            return false
        }
    }

    /// For people and the public API; built only off the forwarding path.
    public var socketAddress: SocketAddress? {
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
