/// Why a request to the store did not get an answer it could use, in words an operator can
/// act on (the relay logs them while the store is away).
public enum EtcdError: Error, Sendable, Equatable, CustomStringConvertible {
    case connectionClosed
    case timedOut
    case responseTooLarge
    /// The gateway answered with an error (gRPC `code`, etcd's message).
    case refused(status: Int, code: Int?, message: String)
    /// The answer was not the JSON etcd sends.
    case unreadable(String)
    /// The lease is gone (it expired, or was revoked).
    case leaseNotFound
    /// etcd runs with authentication and refused the relay's user and password, or has none
    /// from it; the text says which.
    case notAuthenticated(String)
    /// The relay's etcd user may not do what it asked.
    case permissionDenied(String)
    /// The connection could not be made or kept: refused, unreachable, or TLS failed.
    case unreachable(String)

    public var description: String {
        switch self {
        case .connectionClosed: return "the connection to etcd closed"
        case .timedOut: return "etcd did not answer in time"
        case .responseTooLarge: return "etcd's answer was larger than any Parley asks for"
        case let .refused(status, code, message): return "etcd refused the request (HTTP \(status), code \(code.map(String.init) ?? "?")): \(message)"
        case let .unreadable(what): return "etcd's answer could not be read: \(what)"
        case .leaseNotFound: return "etcd no longer has the lease (it expired)"
        case let .notAuthenticated(why): return why
        case let .permissionDenied(why): return why
        case let .unreachable(why): return "cannot reach etcd: \(why)"
        }
    }
}
