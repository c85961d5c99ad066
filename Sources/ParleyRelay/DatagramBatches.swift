import CParleyNet
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
    fileprivate(set) var storage = sockaddr_in6()
    fileprivate(set) var length: socklen_t

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

/// The datagrams one relay loop writes between two flushes, sent with `sendmmsg` straight on
/// the loop's socket.
///
/// Every copy is written (sealed, on an encrypted relay) into one preallocated arena, and its
/// message header, vector and address into preallocated arrays: sending a packet to N
/// receivers allocates nothing and retains nothing. (Through SwiftNIO's channel each copy was
/// an `AddressedEnvelope` boxed into the pipeline and queued, then converted back to a
/// `sockaddr`: a third of the relay's CPU at fan-out 1 was that and the read side's twin.)
///
/// A datagram the kernel will not take because the socket's send buffer is full is shed,
/// never queued: a late voice packet is worth nothing, and a queue would only delay the
/// ones behind it. Used on one loop's thread only.
final class DatagramSendBatch {
    /// Messages per `sendmmsg`; a flush happens when either this or the arena runs out.
    let messageCapacity: Int
    let arenaCapacity: Int

    private let arena: UnsafeMutableRawPointer
    private let messages: UnsafeMutablePointer<parley_mmsghdr>
    private let vectors: UnsafeMutablePointer<iovec>
    private let addresses: UnsafeMutablePointer<sockaddr_in6>
    private let kinds: UnsafeMutablePointer<SentKind>
    private var arenaUsed = 0
    private(set) var count = 0

    /// What one ``send(on:)`` did.
    struct Outcome: Equatable {
        /// Accepted by the kernel.
        var sent = 0
        /// Shed because the socket's send buffer was full (EAGAIN, ENOBUFS).
        var shed = 0
        /// Refused by the kernel for the destination (unreachable, not permitted, too big).
        var failed = 0
        /// The errno of the last refusal, for a log line.
        var lastError: Int32 = 0
    }

    /// - Parameters:
    ///   - messageCapacity: datagrams per system call (at most 1024, the kernel's limit).
    ///   - largestDatagram: the largest datagram that will be appended; the arena holds at
    ///     least one of those beside `messageCapacity` typical ones.
    init(messageCapacity: Int, largestDatagram: Int) {
        precondition(messageCapacity > 0 && messageCapacity <= 1024)
        self.messageCapacity = messageCapacity
        arenaCapacity = messageCapacity * 1_536 + largestDatagram
        arena = .allocate(byteCount: arenaCapacity, alignment: 16)
        messages = .allocate(capacity: messageCapacity)
        messages.initialize(repeating: parley_mmsghdr(), count: messageCapacity)
        vectors = .allocate(capacity: messageCapacity)
        vectors.initialize(repeating: iovec(), count: messageCapacity)
        addresses = .allocate(capacity: messageCapacity)
        addresses.initialize(repeating: sockaddr_in6(), count: messageCapacity)
        kinds = .allocate(capacity: messageCapacity)
        kinds.initialize(repeating: .media, count: messageCapacity)
    }

    deinit {
        arena.deallocate()
        messages.deallocate()
        vectors.deallocate()
        addresses.deallocate()
        kinds.deallocate()
    }

    var isEmpty: Bool { count == 0 }

    /// Whether a datagram of up to `size` bytes fits without a flush first.
    @inline(__always)
    func hasRoom(for size: Int) -> Bool {
        count < messageCapacity && arenaUsed + size <= arenaCapacity
    }

    /// Appends one datagram to `destination`; `write` fills at most `maximumSize` bytes of its
    /// slot and returns how many it wrote (0: nothing is appended). The caller checks
    /// ``hasRoom(for:)`` first. Returns the datagram's size.
    @inline(__always)
    func append(to destination: DatagramAddress, kind: SentKind, maximumSize: Int, _ write: (UnsafeMutableRawBufferPointer) -> Int) -> Int {
        precondition(hasRoom(for: maximumSize), "DatagramSendBatch.append without room: flush first")
        let slot = UnsafeMutableRawBufferPointer(start: arena + arenaUsed, count: maximumSize)
        let size = write(slot)
        guard size > 0 else { return 0 }
        vectors[count] = iovec(iov_base: slot.baseAddress, iov_len: size)
        addresses[count] = destination.storage
        messages[count].msg_hdr = msghdr(
            msg_name: UnsafeMutableRawPointer(addresses + count), msg_namelen: destination.length,
            msg_iov: vectors + count, msg_iovlen: 1,
            msg_control: nil, msg_controllen: 0, msg_flags: 0)
        kinds[count] = kind
        count += 1
        // Each slot starts 16-byte aligned, which the sealing code does not need but memcpy likes.
        arenaUsed += (size + 15) & ~15
        return size
    }

    /// Sends everything appended (as few `sendmmsg` calls as the kernel allows) and empties
    /// the batch. `sent` is told each accepted datagram's kind and size.
    func send(on descriptor: CInt, sent: (SentKind, Int) -> Void) -> Outcome {
        var outcome = Outcome()
        var next = 0
        while next < count {
            let result = parley_sendmmsg(descriptor, messages + next, UInt32(count - next), 0)
            if result > 0 {
                for index in next..<(next + Int(result)) { sent(kinds[index], vectors[index].iov_len) }
                outcome.sent += Int(result)
                next += Int(result)
                continue
            }
            let error = errno
            switch error {
            case EINTR:
                continue
            case EAGAIN, ENOBUFS:
                // The send buffer is full: the rest of this batch is shed, none of it queued.
                outcome.shed += count - next
                next = count
            case EBADF, ENOTSOCK, EFAULT, ENOMEM:
                // Nothing to do with the destination: none of the rest would go either.
                outcome.failed += count - next
                outcome.lastError = error
                next = count
            default:
                // This datagram's destination was refused (EPERM from a firewall, EHOSTUNREACH,
                // EMSGSIZE, a closed socket's EBADF...): skip it, send the others.
                outcome.failed += 1
                outcome.lastError = error
                next += 1
            }
        }
        count = 0
        arenaUsed = 0
        return outcome
    }

    /// Forgets what was appended, unsent (the socket went away).
    func discard() {
        count = 0
        arenaUsed = 0
    }
}

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
