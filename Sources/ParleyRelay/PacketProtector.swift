import NIOCore
import ParleySecurity

/// The per-hop protection of one member's packets: a `SecureSession` agreed in a `parley`
/// member's handshake, a browser member's SRTP (``BrowserProtection``), or nothing on a relay
/// started with `--insecure`.
///
/// The relay opens each incoming packet once with the sender's protection and protects the
/// forwarded copy for each receiver with that receiver's, so a member only ever holds keys
/// for its own hop. `SecureSession` and `SRTPContext` are safe to use from several event
/// loops (a receiver's copies are sealed by whichever loop received the sender's packet):
/// each keeps its send state behind a lock of its own, never a global one.
public struct PacketProtector: Sendable {
    enum Protection: Sendable {
        case plaintext
        case secure(SecureSession)
        case browser(BrowserProtection)
    }

    let protection: Protection

    public static let plaintext = PacketProtector(session: nil)

    init(session: SecureSession?) { protection = session.map { .secure($0) } ?? .plaintext }

    init(browser: BrowserProtection) { protection = .browser(browser) }

    var isSecure: Bool {
        if case .plaintext = protection { return false }
        return true
    }

    var session: SecureSession? {
        if case let .secure(session) = protection { return session }
        return nil
    }

    /// Opens a sealed datagram into a new buffer holding the inner RTP, RTCP or control packet.
    func open(_ packet: ByteBuffer, allocator: ByteBufferAllocator) throws(SecurityError) -> ByteBuffer {
        guard case let .secure(session) = protection else { throw .malformed("not a sealed session") }
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

    /// The most bytes ``seal(_:into:nowNanoseconds:)`` writes for `plaintextCount` bytes.
    @inline(__always)
    func sealedSize(plaintextCount: Int) -> Int {
        switch protection {
        case .plaintext: return plaintextCount
        case .secure: return SecureSession.sealedSize(plaintextCount: plaintextCount)
        case let .browser(browser): return browser.protectedSize(plaintextCount: plaintextCount)
        }
    }

    /// Protects `packet` for this member straight into `output` (a send slot): sealed, SRTP,
    /// or copied as it is in plaintext mode. Returns the bytes written, 0 if protecting failed
    /// (the session's send counter ran out, a browser does not take this packet) or `output`
    /// is too small.
    @inline(__always)
    func seal(_ packet: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, nowNanoseconds: UInt64) -> Int {
        switch protection {
        case .plaintext:
            guard packet.count <= output.count, let source = packet.baseAddress, let target = output.baseAddress else { return 0 }
            target.copyMemory(from: source, byteCount: packet.count)
            return packet.count
        case let .secure(session):
            return (try? session.seal(packet, into: output, nowNanoseconds: nowNanoseconds)) ?? 0
        case let .browser(browser):
            return browser.protect(packet, into: output)
        }
    }
}
