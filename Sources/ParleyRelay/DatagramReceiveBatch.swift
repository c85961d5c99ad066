import CParleyNet
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The datagrams one relay loop reads with one `recvmmsg`: each lands in its own slot of a
/// preallocated buffer, and is handed on as a slice of it (no copy, no allocation), with
/// its source address as the kernel wrote it. Used on one loop's thread only.
final class DatagramReceiveBatch {
    /// Datagrams per `recvmmsg`.
    let capacity: Int
    /// Bytes per slot: a longer datagram is cut short and reported as truncated.
    let slotSize: Int

    private var arena: ByteBuffer
    private let headers: DatagramHeaders

    init(capacity: Int, slotSize: Int, allocator: ByteBufferAllocator) {
        precondition(slotSize > 0)
        headers = DatagramHeaders(capacity: capacity)
        self.capacity = capacity
        self.slotSize = slotSize
        arena = allocator.buffer(capacity: capacity * slotSize)
    }

    /// Reads what is waiting, up to ``capacity`` datagrams, without blocking. Returns how
    /// many arrived: 0 when none were waiting, or -errno on an error. The previous batch's
    /// slices must no longer be needed (a slice kept beyond costs a new arena, not a bug).
    func receive(on descriptor: CInt) -> Int {
        // Reuses the storage when no slice of the last batch is still alive.
        arena.clear()
        let result = arena.withUnsafeMutableWritableBytes { raw -> Int32 in
            // The kernel rewrites each header's address length and flags: set them afresh.
            for index in 0..<capacity {
                headers.point(index, at: raw.baseAddress! + index * slotSize, length: slotSize,
                              addressLength: socklen_t(MemoryLayout<sockaddr_in6>.size))
            }
            return parley_recvmmsg(descriptor, headers.messages, UInt32(capacity), Int32(MSG_DONTWAIT))
        }
        if result < 0 {
            let error = errno
            return error == EAGAIN || error == EINTR ? 0 : -Int(error)
        }
        arena.moveWriterIndex(to: Int(result) * slotSize)
        return Int(result)
    }

    /// The `index`th datagram's bytes.
    @inline(__always)
    func packet(_ index: Int) -> ByteBuffer {
        arena.getSlice(at: index * slotSize, length: min(Int(headers.messages[index].msg_len), slotSize))!
    }

    /// Where the `index`th datagram came from.
    @inline(__always)
    func source(_ index: Int) -> DatagramAddress {
        DatagramAddress(storage: headers.addresses[index], length: headers.messages[index].msg_hdr.msg_namelen)
    }

    /// Whether the `index`th datagram was longer than a slot (and so cut short).
    @inline(__always)
    func isTruncated(_ index: Int) -> Bool {
        headers.messages[index].msg_hdr.msg_flags & Int32(MSG_TRUNC) != 0
    }
}
