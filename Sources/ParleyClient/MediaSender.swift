import NIOCore
import ParleyBasics
#if canImport(Glibc)
import Glibc
#endif

/// Where the capture thread's packets go: the call's socket and the relay's address, made
/// once per relay (a join, a redirect, a failover) on the network loop. The socket is the one
/// the loop's channel reads; a UDP `sendto` from another thread is safe beside it.
final class MediaDestination: @unchecked Sendable {
    // @unchecked: immutable after init; sockaddr_storage is a plain C struct.
    let socket: CInt
    private let address: sockaddr_storage
    private let length: socklen_t

    init(socket: CInt, address: SocketAddress) {
        self.socket = socket
        var storage = sockaddr_storage()
        length = address.withSockAddr { pointer, size in
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: pointer, count: size)) }
            return socklen_t(size)
        }
        self.address = storage
    }

    /// Sends one datagram; false when the kernel did not take it (a full send buffer: the
    /// packet is dropped, as the network would drop it, rather than delay the next).
    func send(_ bytes: UnsafeRawBufferPointer) -> Bool {
        withUnsafePointer(to: address) { storage in
            storage.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(socket, bytes.baseAddress, bytes.count, CInt(MSG_DONTWAIT), $0, length) }
        } == bytes.count
    }
}

/// The capture thread's way out for media: the destination and the link's session as copies
/// it refreshes only when the loop replaced them, a seal into a buffer of its own, and one
/// `sendto`. A packet takes one lock, the session's counter (shared with the loop's RTCP and
/// control packets); with `--insecure`, none. Nothing is allocated. Belongs to one thread.
///
/// Nothing is sent without a destination, nor, on a secure link, without a session: not joined
/// yet, reconnecting or left, the packet is dropped and `send` says so.
final class MediaSender {
    private let destinations: VersionedValue<MediaDestination?>
    private var destination = VersionedValue<MediaDestination?>.Copy(placeholder: nil)
    /// nil with `--insecure`: packets go as they are.
    private let sealer: MediaSealer?

    init(destinations: VersionedValue<MediaDestination?>, sealer: MediaSealer?) {
        self.destinations = destinations
        self.sealer = sealer
    }

    /// Sends one RTP packet, sealed when the link is secure; false when it was not sent.
    func send(_ packet: UnsafeRawBufferPointer) -> Bool {
        destinations.refresh(&destination)
        guard let to = destination.value else { return false }
        guard let sealer else { return to.send(packet) }
        guard let sealed = sealer.seal(packet, nowNanoseconds: MonotonicClock.now()) else { return false }
        return to.send(sealed)
    }
}
