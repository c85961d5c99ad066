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
    private let messages: UnsafeMutablePointer<parley_mmsghdr>
    private let vectors: UnsafeMutablePointer<iovec>
    private let addresses: UnsafeMutablePointer<sockaddr_in6>

    init(capacity: Int, slotSize: Int, allocator: ByteBufferAllocator) {
        precondition(capacity > 0 && capacity <= 1024 && slotSize > 0)
        self.capacity = capacity
        self.slotSize = slotSize
        arena = allocator.buffer(capacity: capacity * slotSize)
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

    /// Reads what is waiting, up to ``capacity`` datagrams, without blocking. Returns how
    /// many arrived: 0 when none were waiting, or -errno on an error. The previous batch's
    /// slices must no longer be needed (a slice kept beyond costs a new arena, not a bug).
    func receive(on descriptor: CInt) -> Int {
        // Reuses the storage when no slice of the last batch is still alive.
        arena.clear()
        let result = arena.withUnsafeMutableWritableBytes { raw -> Int32 in
            for index in 0..<capacity {
                vectors[index] = iovec(iov_base: raw.baseAddress! + index * slotSize, iov_len: slotSize)
                messages[index].msg_hdr = msghdr(
                    msg_name: UnsafeMutableRawPointer(addresses + index), msg_namelen: socklen_t(MemoryLayout<sockaddr_in6>.size),
                    msg_iov: vectors + index, msg_iovlen: 1,
                    msg_control: nil, msg_controllen: 0, msg_flags: 0)
                messages[index].msg_len = 0
            }
            return parley_recvmmsg(descriptor, messages, UInt32(capacity), Int32(MSG_DONTWAIT))
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
        arena.getSlice(at: index * slotSize, length: min(Int(messages[index].msg_len), slotSize))!
    }

    /// Where the `index`th datagram came from.
    @inline(__always)
    func source(_ index: Int) -> DatagramAddress {
        DatagramAddress(storage: addresses[index], length: messages[index].msg_hdr.msg_namelen)
    }

    /// Whether the `index`th datagram was longer than a slot (and so cut short).
    @inline(__always)
    func isTruncated(_ index: Int) -> Bool {
        messages[index].msg_hdr.msg_flags & Int32(MSG_TRUNC) != 0
    }
}
