import CParleyNet
import ParleyDatagrams

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

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
    private let headers: DatagramHeaders
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
        headers = DatagramHeaders(capacity: messageCapacity)
        self.messageCapacity = messageCapacity
        arenaCapacity = messageCapacity * 1_536 + largestDatagram
        arena = .allocate(byteCount: arenaCapacity, alignment: 16)
        kinds = .allocate(capacity: messageCapacity)
        kinds.initialize(repeating: .media, count: messageCapacity)
    }

    deinit {
        arena.deallocate()
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
        let slot = arena + arenaUsed
        let size = write(UnsafeMutableRawBufferPointer(start: slot, count: maximumSize))
        guard size > 0 else { return 0 }
        headers.addresses[count] = destination.storage
        headers.point(count, at: slot, length: size, addressLength: destination.length)
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
            let result = parley_sendmmsg(descriptor, headers.messages + next, UInt32(count - next), 0)
            if result > 0 {
                for index in next..<(next + Int(result)) { sent(kinds[index], headers.vectors[index].iov_len) }
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
                // EMSGSIZE...): skip it, send the others.
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
