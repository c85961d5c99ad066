import NIOCore
import ParleySecurity

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
        var output = allocator.buffer(capacity: max(packet.readableBytes - 32, 1))
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

    /// Protects `packet` for this session's member: sealed into a new buffer, or, in plaintext
    /// mode, the same buffer (every receiver's copy then shares one storage: no allocation).
    @inline(__always)
    func seal(_ packet: ByteBuffer, allocator: ByteBufferAllocator, nowNanoseconds: UInt64) -> ByteBuffer? {
        guard let session else { return packet }
        var output = allocator.buffer(capacity: SecureSession.sealedSize(plaintextCount: packet.readableBytes))
        let count = packet.withUnsafeReadableBytes { plain in
            output.withUnsafeMutableWritableBytes { out in
                (try? session.seal(plain, into: out, nowNanoseconds: nowNanoseconds)) ?? 0
            }
        }
        guard count > 0 else { return nil }
        output.moveWriterIndex(forwardBy: count)
        return output
    }

    /// ``seal(_:allocator:nowNanoseconds:)`` for bytes the relay built itself (control, reports).
    func seal(_ bytes: [UInt8], allocator: ByteBufferAllocator, nowNanoseconds: UInt64) -> ByteBuffer? {
        seal(allocator.buffer(bytes: bytes), allocator: allocator, nowNanoseconds: nowNanoseconds)
    }
}
