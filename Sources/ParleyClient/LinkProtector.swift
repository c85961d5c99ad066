import ParleySecurity
import ParleyWire
import Synchronization

/// The client's protection of its hop to the relay: the one object that seals what the
/// client sends (media from the capture thread; RTCP and control from the network loop) and
/// opens what the relay sends, with the current ``SecureSession``, which the link replaces
/// on each join. The relay's side of the same hop is its `NoiseTransport`.
///
/// With no session (not joined yet, reconnecting, or `--insecure`), ``protect(_:nowNanoseconds:)``
/// returns nil and the capture thread sends nothing: media never leaves unprotected by accident.
///
/// It also remembers the authentication tags of the last packets it sealed, so the link can
/// tell a relay's plaintext "not joined" that answers one of them (the relay echoes the tag)
/// from one forged by someone who never saw our packets.
public final class LinkProtector: Sendable {
    private struct State {
        var session: SecureSession?
        /// Tags of the last ``remembered`` packets sealed with `session`, oldest overwritten first.
        var tags = [[UInt8]](repeating: [], count: LinkProtector.remembered)
        var nextTag = 0
    }

    /// About two seconds of a call's packets (media at 50 a second, RTCP, pings).
    static let remembered = 128

    private let current = Mutex(State())

    public init() {}

    public var session: SecureSession? { current.withLock { $0.session } }

    func set(_ session: SecureSession?) {
        current.withLock { state in
            state = State()
            state.session = session
        }
    }

    /// Seals `plaintext` with the current session; nil when there is none.
    public func protect(_ plaintext: UnsafeRawBufferPointer, nowNanoseconds: UInt64) -> [UInt8]? {
        guard let session else { return nil }
        var output = [UInt8](repeating: 0, count: SecureSession.sealedSize(plaintextCount: plaintext.count))
        guard let count = try? output.withUnsafeMutableBytes({ try session.seal(plaintext, into: $0, nowNanoseconds: nowNanoseconds) }) else {
            return nil
        }
        let sealed = Array(output.prefix(count))
        let tag = Array(sealed.suffix(SealedHeader.tagSize))
        current.withLock { state in
            // A session replaced meanwhile keeps its own record.
            guard state.session === session else { return }
            state.tags[state.nextTag] = tag
            state.nextTag = (state.nextTag + 1) % Self.remembered
        }
        return sealed
    }

    /// Opens a sealed datagram from the relay into `plaintext`; returns the inner packet's
    /// length, nil when there is no session or the packet is not authentic (or replayed).
    func open(_ datagram: UnsafeRawBufferPointer, into plaintext: UnsafeMutableRawBufferPointer) -> Int? {
        guard let session else { return nil }
        return try? session.open(datagram, into: plaintext)
    }

    /// Whether `tag` is the authentication tag of a packet sealed recently with the current session.
    func sealedRecently(tag: [UInt8]) -> Bool {
        guard tag.count == SealedHeader.tagSize else { return false }
        return current.withLock { $0.session != nil && $0.tags.contains(tag) }
    }
}
