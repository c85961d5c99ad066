import ParleySecurity
import ParleyWire

/// How one leg's datagrams are opened when they arrive and sealed when they leave: the only
/// thing that differs between a `parley` member over the Noise hop, a trunk to another relay
/// (Noise too, keyed by the relays' own keys) and a member on an `--insecure` relay. What
/// happens to the packet inside (forwarding, RTCP, control) is the same for every leg.
///
/// A new kind of leg (a browser over DTLS-SRTP) is one more conformer: it says which
/// datagrams it carries, opens them in place, and seals copies for its member. `seal` is
/// called by whichever loop forwards to the leg, several at once: a conformer keeps its
/// sending state safe for that (``SecureSession`` has a lock per session, never a global one).
protocol LegTransport: AnyObject, Sendable {
    /// Whether the leg's datagrams arrive as `kind` (what the first byte says, RFC 7983):
    /// sealed packets for a Noise leg; RTP, RTCP and control for a plaintext one.
    func carries(_ kind: PacketKind) -> Bool

    /// Opens `datagram` where it lies in the read batch: on success its bytes are the packet
    /// inside (RTP, RTCP or control) and its kind is that packet's; on failure, why it goes
    /// no further.
    func open(_ datagram: inout InboundDatagram) -> DropReason?

    /// The most bytes ``seal(_:into:nowNanoseconds:)`` writes for `plaintextCount` bytes.
    func sealedSize(plaintextCount: Int) -> Int

    /// Protects `packet` for this leg straight into `output` (a slot of the send batch).
    /// Returns the bytes written: 0 when nothing is to be sent (the keys ran out, or the leg
    /// does not carry such a packet).
    func seal(_ packet: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, nowNanoseconds: UInt64) -> Int

    /// Whether the leg is encrypted: an answer to a plaintext datagram must then be smaller
    /// by the seal's overhead, and joins come only inside a handshake.
    var isSecure: Bool { get }
}

/// A leg on a relay started `--insecure`: packets travel as they are.
final class PlaintextTransport: LegTransport {
    static let shared = PlaintextTransport()

    func carries(_ kind: PacketKind) -> Bool {
        switch kind {
        case .rtp, .rtcp, .control: return true
        case .handshake, .sealed, .stun, .dtls, .unknown: return false
        }
    }

    @inline(__always)
    func open(_ datagram: inout InboundDatagram) -> DropReason? { nil }

    @inline(__always)
    func sealedSize(plaintextCount: Int) -> Int { plaintextCount }

    @inline(__always)
    func seal(_ packet: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, nowNanoseconds: UInt64) -> Int {
        guard packet.count <= output.count, let source = packet.baseAddress, let target = output.baseAddress else { return 0 }
        target.copyMemory(from: source, byteCount: packet.count)
        return packet.count
    }

    var isSecure: Bool { false }
}

/// A leg over the Noise hop (`parley` members, and trunks between relays): the
/// ``SecureSession`` its handshake agreed. The relay opens each incoming packet once with the
/// sender's session and seals each forwarded copy with the receiver's, so a member only ever
/// holds keys for its own hop.
final class NoiseTransport: LegTransport {
    let session: SecureSession

    init(session: SecureSession) { self.session = session }

    func carries(_ kind: PacketKind) -> Bool { kind == .sealed }

    @inline(__always)
    func open(_ datagram: inout InboundDatagram) -> DropReason? {
        guard let header = datagram.sealedHeader else { return .malformed }
        do {
            let count = try session.openInPlace(datagram.bytes, header: header)
            datagram.opened(at: SealedHeader.size, count: count)
            return nil
        } catch {
            switch error {
            case .replayed: return .replayed
            case .malformed: return .malformed
            default: return .decryptFailed
            }
        }
    }

    @inline(__always)
    func sealedSize(plaintextCount: Int) -> Int { SecureSession.sealedSize(plaintextCount: plaintextCount) }

    @inline(__always)
    func seal(_ packet: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, nowNanoseconds: UInt64) -> Int {
        (try? session.seal(packet, into: output, nowNanoseconds: nowNanoseconds)) ?? 0
    }

    var isSecure: Bool { true }
}
