import CParleyDTLS
import ParleyWire

/// The relay's DTLS identity for browsers: an ECDSA P-256 key and a self-signed certificate
/// made when the relay starts (WebRTC trusts a certificate by the fingerprint the signalling
/// carries, not by a CA, RFC 8827 §6.5), and the OpenSSL context every connection shares.
///
/// Owns its `parley_dtls_context` and frees it in `deinit`; connections keep the context alive.
public final class DTLSContext: @unchecked Sendable {
    let context: OpaquePointer
    /// SHA-256 of the certificate, what `a=fingerprint:sha-256` gives the browser.
    public let fingerprint: CertificateFingerprint

    /// A certificate valid for `validityDays` (a relay that runs longer than that is restarted by
    /// then, or makes a new context; each connection checks only the fingerprint).
    public init(validityDays: Int = 30) throws(DTLSError) {
        var error = [CChar](repeating: 0, count: 256)
        guard let made = parley_dtls_context_new(Int32(validityDays), &error, error.count) else {
            throw .setupFailed(String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        context = made
        var bytes = [UInt8](repeating: 0, count: 32)
        parley_dtls_context_fingerprint(made, &bytes)
        fingerprint = CertificateFingerprint(algorithm: "sha-256", bytes: bytes)
    }

    deinit { parley_dtls_context_free(context) }
}

/// What went wrong with DTLS, said for a log line.
public enum DTLSError: Error, Sendable, Hashable, CustomStringConvertible {
    case setupFailed(String)
    case allocationFailed
    case unsupportedFingerprint(String)

    public var description: String {
        switch self {
        case let .setupFailed(reason): return "DTLS could not be set up: \(reason)"
        case .allocationFailed: return "OpenSSL could not allocate a DTLS connection"
        case let .unsupportedFingerprint(algorithm): return "the peer's certificate fingerprint uses \(algorithm), not sha-256"
        }
    }
}
