import NIOCore

/// The per-hop transform of a session's packets: today the identity.
///
/// The secure-transport issue replaces this with AEAD keys agreed in a handshake: the relay
/// then `open`s each incoming packet once with the sender's keys, and `seal`s the forwarded
/// copy for each receiver with that receiver's keys. The forwarding path already calls
/// `seal` once per receiver, so per-receiver encryption slots in without reshaping it.
/// With keys, a sealing nonce must never repeat: since each event loop seals for a receiver
/// independently, the nonce space will be split by loop (or the counter made atomic).
public struct PacketProtector: Sendable {
    public static let identity = PacketProtector()

    public init() {}

    /// Checks and strips protection from an incoming packet. Identity: the packet itself.
    @inline(__always)
    func open(_ packet: ByteBuffer) -> ByteBuffer? { packet }

    /// Protects a packet for this session's receiver. Identity: the same buffer, so every
    /// receiver's copy shares one storage and forwarding allocates nothing.
    @inline(__always)
    func seal(_ packet: ByteBuffer, allocator: ByteBufferAllocator) -> ByteBuffer { packet }
}
