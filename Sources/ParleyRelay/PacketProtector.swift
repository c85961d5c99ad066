import NIOCore
import ParleySecurity
import ParleyWire

/// The per-hop protection of one member's packets: a `SecureSession` agreed in the member's
/// handshake, or nothing on a relay started with `--insecure`.
///
/// The relay opens each incoming packet once with the sender's session and seals the
/// forwarded copy for each receiver with that receiver's session, so a member only ever
/// holds keys for its own hop. `SecureSession` is safe to use from several event loops (a
/// receiver's copies are sealed by whichever loop received the sender's packet): its send
/// counter sits behind a per-session lock, never a global one.
public struct PacketProtector: Sendable {
    /// Nil: plaintext, `--insecure`.
    let session: SecureSession?

    public static let plaintext = PacketProtector(session: nil)

    init(session: SecureSession?) { self.session = session }

    var isSecure: Bool { session != nil }

    /// Opens a sealed datagram into a new buffer holding the inner RTP, RTCP or control packet.
    func open(_ packet: ByteBuffer, allocator: ByteBufferAllocator) throws(SecurityError) -> ByteBuffer {
        guard let session else { throw .malformed("plaintext session") }
        var output = allocator.buffer(capacity: max(packet.readableBytes - SealedHeader.overhead, 1))
        var failure: SecurityError?
        let count = packet.withUnsafeReadableBytes { sealed in
            output.withUnsafeMutableWritableBytes { out -> Int in
                do throws(SecurityError) { return try session.open(sealed, into: out) } catch { failure = error; return 0 }
            }
        }
        if let failure { throw failure }
        output.moveWriterIndex(forwardBy: count)
        return output
    }

    /// The most bytes ``seal(_:into:nowNanoseconds:)`` writes for `plaintextCount` bytes.
    @inline(__always)
    func sealedSize(plaintextCount: Int) -> Int {
        session == nil ? plaintextCount : SecureSession.sealedSize(plaintextCount: plaintextCount)
    }

    /// Protects `packet` for this session's member straight into `output` (a send slot):
    /// sealed, or copied as it is in plaintext mode. Returns the bytes written, 0 if sealing
    /// failed (the session's send counter ran out) or `output` is too small.
    @inline(__always)
    func seal(_ packet: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, nowNanoseconds: UInt64) -> Int {
        guard let session else {
            guard packet.count <= output.count, let source = packet.baseAddress, let target = output.baseAddress else { return 0 }
            target.copyMemory(from: source, byteCount: packet.count)
            return packet.count
        }
        return (try? session.seal(packet, into: output, nowNanoseconds: nowNanoseconds)) ?? 0
    }
}
