import ParleyBasics
import ParleySecurity
import ParleyWire
import Synchronization

/// The client's protection of its hop to the relay: the one object that seals what the
/// client sends (media from the capture thread; RTCP and control from the network loop) with
/// the current ``SecureSession``, which the link replaces on each join. What the relay sends
/// the link opens itself, with the session's receiving half (``RelayLink/sessionReceiver``).
/// The relay's side of the same hop is its `NoiseTransport`.
///
/// With no session (not joined yet, reconnecting, or `--insecure`), nothing is sealed and the
/// capture thread sends nothing: media never leaves unprotected by accident.
///
/// It also remembers the authentication tags of the last packets it sealed, so the link can
/// tell a relay's plaintext "not joined" that answers one of them (the relay echoes the tag)
/// from one forged by someone who never saw our packets.
///
/// The capture thread seals every media packet, so its path takes no lock of ours: it keeps
/// its own copy of the session (``MediaSealer``), refreshed only when the link replaced it,
/// and writes each tag into a ring of atomics. The one lock on its path is the session's own
/// counter, which the loop's packets share.
public final class LinkProtector: @unchecked Sendable {
    // @unchecked: the tag ring is raw memory of atomics, allocated once and freed in deinit.

    /// The session, and its number: a tag counts only when it was sealed under the session now in use.
    fileprivate struct Current: Sendable {
        var session: SecureSession?
        var number: UInt64
    }

    /// About two seconds of a call's packets (media at 50 a second, RTCP, pings).
    static let remembered = 128

    fileprivate let current = VersionedValue(Current(session: nil, number: 1))
    /// Each slot: the tag's two 64-bit halves and the number of the session that sealed it
    /// (0: empty), written last, so a reader that finds the number finds the tag with it
    /// (a reader racing a writer may see a torn slot, which matches nothing).
    private let slots: UnsafeMutablePointer<Atomic<UInt64>>
    private let nextSlot = Atomic<Int>(0)
    private static let slotWords = 3

    public init() {
        let words = Self.remembered * Self.slotWords
        slots = .allocate(capacity: words)
        for index in 0..<words { (slots + index).initialize(to: Atomic(0)) }
    }

    deinit {
        slots.deinitialize(count: Self.remembered * Self.slotWords)
        slots.deallocate()
    }

    public var session: SecureSession? { current.current.session }

    /// Replaces the session; the tags sealed under the previous one no longer count.
    func set(_ session: SecureSession?) {
        current.update { $0 = Current(session: session, number: $0.number &+ 1) }
    }

    /// Seals `plaintext` with the current session (for the loop's own packets); nil when there is none.
    public func protect(_ plaintext: UnsafeRawBufferPointer, nowNanoseconds: UInt64) -> [UInt8]? {
        let now = current.current
        guard let session = now.session else { return nil }
        var output = [UInt8](repeating: 0, count: SecureSession.sealedSize(plaintextCount: plaintext.count))
        let count = output.withUnsafeMutableBytes { seal(plaintext, into: $0, session: session, number: now.number, nowNanoseconds: nowNanoseconds) }
        guard let count else { return nil }
        output.removeLast(output.count - count)
        return output
    }

    /// Seals into `output` and remembers the tag; nil when the session cannot seal.
    fileprivate func seal(
        _ plaintext: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, session: SecureSession, number: UInt64,
        nowNanoseconds: UInt64
    ) -> Int? {
        guard let count = try? session.seal(plaintext, into: output, nowNanoseconds: nowNanoseconds) else { return nil }
        let tag = UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(output)[count - SealedHeader.tagSize..<count])
        let slot = slots + (nextSlot.wrappingAdd(1, ordering: .relaxed).oldValue & Int.max) % Self.remembered * Self.slotWords
        slot[0].store(tag.loadUnaligned(fromByteOffset: 0, as: UInt64.self), ordering: .relaxed)
        slot[1].store(tag.loadUnaligned(fromByteOffset: 8, as: UInt64.self), ordering: .relaxed)
        slot[2].store(number, ordering: .releasing)
        return count
    }

    /// Whether `tag` is the authentication tag of a packet sealed recently with the current session.
    func sealedRecently(tag: [UInt8]) -> Bool {
        guard tag.count == SealedHeader.tagSize else { return false }
        let now = current.current
        guard now.session != nil else { return false }
        let (first, second) = tag.withUnsafeBytes { ($0.loadUnaligned(fromByteOffset: 0, as: UInt64.self), $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) }
        for index in 0..<Self.remembered {
            let slot = slots + index * Self.slotWords
            if slot[2].load(ordering: .acquiring) == now.number, slot[0].load(ordering: .relaxed) == first, slot[1].load(ordering: .relaxed) == second {
                return true
            }
        }
        return false
    }
}

/// The capture thread's sealer: its own copy of the link's session, refreshed without a lock
/// unless the link replaced it, and a buffer of its own to seal into. Belongs to one thread.
final class MediaSealer {
    private let protector: LinkProtector
    private var current = VersionedValue<LinkProtector.Current>.Copy(placeholder: .init(session: nil, number: 0))
    private let output: UnsafeMutableRawBufferPointer

    init(protector: LinkProtector) {
        self.protector = protector
        output = .allocate(byteCount: SecureSession.sealedSize(plaintextCount: RTPPacketizer.maximumPacketSize), alignment: 16)
    }

    deinit { output.deallocate() }

    /// Seals `packet` with the session in use now; nil when there is none (nothing may be sent).
    /// The sealed bytes are valid until the next call.
    func seal(_ packet: UnsafeRawBufferPointer, nowNanoseconds: UInt64) -> UnsafeRawBufferPointer? {
        protector.current.refresh(&current)
        guard let session = current.value.session, SecureSession.sealedSize(plaintextCount: packet.count) <= output.count,
              let count = protector.seal(packet, into: output, session: session, number: current.value.number, nowNanoseconds: nowNanoseconds) else {
            return nil
        }
        return UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(output)[0..<count])
    }
}
