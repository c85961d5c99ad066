import CParleyNet

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The datagrams one relay loop reads with one `recvmmsg`: each lands in its own slot of a
/// preallocated arena and is handed on where it lies (no copy, no allocation, no reference
/// count), with its source address as the kernel wrote it. A sealed datagram is opened in
/// its slot. Used on one loop's thread only; a slot's bytes are valid until the next read.
///
/// The relay's loops and the client's network loop both read this way; the per-datagram
/// accessors are inlinable so that either compiles them into its own read loop.
public final class DatagramReceiveBatch {
    /// Datagrams per `recvmmsg`.
    public let capacity: Int
    /// Bytes per slot: a longer datagram is cut short and reported as truncated.
    public let slotSize: Int

    @usableFromInline let arena: UnsafeMutableRawPointer
    @usableFromInline let headers: DatagramHeaders

    public init(capacity: Int, slotSize: Int) {
        precondition(slotSize > 0)
        headers = DatagramHeaders(capacity: capacity)
        self.capacity = capacity
        self.slotSize = slotSize
        arena = .allocate(byteCount: capacity * slotSize, alignment: 16)
    }

    deinit { arena.deallocate() }

    /// Reads what is waiting, up to ``capacity`` datagrams, without blocking. Returns how
    /// many arrived: 0 when none were waiting, or -errno on an error. The previous batch's
    /// bytes are overwritten.
    public func receive(on descriptor: CInt) -> Int {
        // The kernel rewrites each header's address length and flags: set them afresh.
        for index in 0..<capacity {
            headers.point(index, at: arena + index * slotSize, length: slotSize, addressLength: socklen_t(MemoryLayout<sockaddr_in6>.size))
        }
        let result = parley_recvmmsg(descriptor, headers.messages, UInt32(capacity), Int32(MSG_DONTWAIT))
        if result < 0 {
            let error = errno
            return error == EAGAIN || error == EINTR ? 0 : -Int(error)
        }
        return Int(result)
    }

    /// The `index`th datagram's bytes, in its slot.
    @inlinable @inline(__always)
    public func bytes(_ index: Int) -> UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(start: arena + index * slotSize, count: min(Int(headers.messages[index].msg_len), slotSize))
    }

    /// Where the `index`th datagram came from.
    @inlinable @inline(__always)
    public func source(_ index: Int) -> DatagramAddress {
        DatagramAddress(storage: headers.addresses[index], length: headers.messages[index].msg_hdr.msg_namelen)
    }

    /// Whether the `index`th datagram was longer than a slot (and so cut short).
    @inlinable @inline(__always)
    public func isTruncated(_ index: Int) -> Bool {
        headers.messages[index].msg_hdr.msg_flags & Int32(MSG_TRUNC) != 0
    }
}
