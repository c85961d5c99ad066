import CParleyNet

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The message headers, vectors and address slots one `recvmmsg` or `sendmmsg` call takes,
/// allocated once for the batch that owns them: entry i's header names vector i and
/// address slot i.
///
/// Public, with its per-datagram members inlinable, for the relay's send batch: the relay's
/// forwarding compiles them in as it did when they were its own.
public final class DatagramHeaders {
    public let capacity: Int
    public let messages: UnsafeMutablePointer<parley_mmsghdr>
    public let vectors: UnsafeMutablePointer<iovec>
    public let addresses: UnsafeMutablePointer<sockaddr_in6>

    public init(capacity: Int) {
        precondition(capacity > 0 && capacity <= 1024, "at most 1024 datagrams per call, the kernel's limit")
        self.capacity = capacity
        messages = .allocate(capacity: capacity)
        messages.initialize(repeating: parley_mmsghdr(), count: capacity)
        vectors = .allocate(capacity: capacity)
        vectors.initialize(repeating: iovec(), count: capacity)
        addresses = .allocate(capacity: capacity)
        addresses.initialize(repeating: sockaddr_in6(), count: capacity)
    }

    deinit {
        messages.deallocate()
        vectors.deallocate()
        addresses.deallocate()
    }

    /// Points entry `index` at `length` bytes from `bytes` and at its address slot, of which
    /// the call reads or writes `addressLength` bytes.
    @inlinable @inline(__always)
    public func point(_ index: Int, at bytes: UnsafeMutableRawPointer, length: Int, addressLength: socklen_t) {
        vectors[index] = iovec(iov_base: bytes, iov_len: length)
        messages[index] = parley_mmsghdr(
            msg_hdr: msghdr(
                msg_name: UnsafeMutableRawPointer(addresses + index), msg_namelen: addressLength,
                msg_iov: vectors + index, msg_iovlen: 1,
                msg_control: nil, msg_controllen: 0, msg_flags: 0),
            msg_len: 0)
    }
}
