import ParleySecurity
import Synchronization

/// The current secure session, shared between the network loop (which replaces it on each
/// join) and the capture thread (which seals outgoing media with it).
///
/// With no session (not joined yet, reconnecting, or `--insecure`), ``protect(_:nowNanoseconds:)``
/// returns nil and the capture thread sends nothing: media never leaves unprotected by accident.
public final class MediaProtector: Sendable {
    private let current = Mutex<SecureSession?>(nil)

    public init() {}

    public var session: SecureSession? { current.withLock { $0 } }

    func set(_ session: SecureSession?) { current.withLock { $0 = session } }

    /// Seals `plaintext` with the current session; nil when there is none.
    public func protect(_ plaintext: UnsafeRawBufferPointer, nowNanoseconds: UInt64) -> [UInt8]? {
        guard let session else { return nil }
        var output = [UInt8](repeating: 0, count: SecureSession.sealedSize(plaintextCount: plaintext.count))
        guard let count = try? output.withUnsafeMutableBytes({ try session.seal(plaintext, into: $0, nowNanoseconds: nowNanoseconds) }) else {
            return nil
        }
        return Array(output.prefix(count))
    }
}
