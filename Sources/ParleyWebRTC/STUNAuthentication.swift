import Crypto
import ParleyWire

/// MESSAGE-INTEGRITY with ICE's short-term credentials (RFC 8489 §9.1, RFC 8445 §7.2.2):
/// an HMAC-SHA1 keyed with the password of the agent that receives the request.
public struct STUNAuthentication: Sendable {
    private let key: SymmetricKey

    public init(password: String) {
        key = SymmetricKey(data: Array(password.utf8))
    }

    /// Whether `message` carries MESSAGE-INTEGRITY and it is this password's, compared in
    /// constant time.
    public func isAuthentic(_ message: STUNMessageView) -> Bool {
        guard let integrity = message.integrity else { return false }
        let code = message.withIntegrityInput { header, attributes -> HashedAuthenticationCode<Insecure.SHA1> in
            var hmac = HMAC<Insecure.SHA1>(key: key)
            hmac.update(data: header)
            hmac.update(data: attributes)
            return hmac.finalize()
        }
        guard let code else { return false }
        return code == integrity.value
    }

    /// Signs a message being written (``STUNMessageWriter/appendMessageIntegrity(_:)``).
    public func sign(_ message: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) {
        let code = HMAC<Insecure.SHA1>.authenticationCode(for: message, using: key)
        code.withUnsafeBytes { output.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0.prefix(output.count))) }
    }
}
