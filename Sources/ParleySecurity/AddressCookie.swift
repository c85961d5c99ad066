import Crypto
import Synchronization
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Stateless address cookies: proof that a client receives at the address it sends from,
/// before the relay spends a Diffie-Hellman operation, any shared budget, or sends anything
/// large to it.
///
/// A cookie is HMAC-SHA256(epoch key, address)[0..<16], where the epoch key is
/// HMAC-SHA256(cookie secret, minute). The cookie secret is random, made when the relay
/// starts and never stored, so a restart invalidates every cookie (clients fetch a fresh one
/// with each hello). A cookie is valid in its minute and the next, so it lives 60–120
/// seconds, and nothing has to be stored or shared between event loops beyond the two
/// current epoch keys. The handshake replay cache covers the same two minutes, so a captured
/// handshake can be replayed neither within the window (cache) nor after it (cookie).
///
/// Checking one costs one or two HMACs of a 19-byte address: a flood of inits with forged
/// cookies costs the relay about what receiving them does.
public struct AddressCookieMinter: Sendable {
    public static let epochSeconds: UInt64 = 60
    public static let cookieSize = 16
    private let secret: SymmetricKey
    private let epochKeys: EpochKeyCache

    public init(secret: SymmetricKey = SymmetricKey(size: .bits256)) {
        self.secret = secret
        epochKeys = EpochKeyCache()
    }

    public static func epoch(unixSeconds: UInt64) -> UInt64 { unixSeconds / epochSeconds }

    public func cookie(for address: [UInt8], unixSeconds: UInt64) -> [UInt8] {
        let keys = epochKeys.keys(for: Self.epoch(unixSeconds: unixSeconds), secret: secret)
        return Array(Self.code(keys.current, address).prefix(Self.cookieSize))
    }

    /// Whether `cookie` is this minute's or the last minute's for `address`. Concrete types
    /// and prepared HMAC states: this runs for every init, forged ones included.
    public func isValid(_ cookie: UnsafeRawBufferPointer, for address: [UInt8], unixSeconds: UInt64) -> Bool {
        guard cookie.count == Self.cookieSize else { return false }
        let keys = epochKeys.keys(for: Self.epoch(unixSeconds: unixSeconds), secret: secret)
        return Self.matches(Self.code(keys.current, address), cookie) || Self.matches(Self.code(keys.previous, address), cookie)
    }

    public func isValid(_ cookie: [UInt8], for address: [UInt8], unixSeconds: UInt64) -> Bool {
        cookie.withUnsafeBytes { isValid($0, for: address, unixSeconds: unixSeconds) }
    }

    /// HMAC-SHA256 of `address`, continuing from a state that has taken the key already.
    private static func code(_ prepared: HMAC<SHA256>, _ address: [UInt8]) -> HashedAuthenticationCode<SHA256> {
        var mac = prepared
        mac.update(data: address)
        return mac.finalize()
    }

    /// Whether `presented` is the first bytes of `code`, in time that depends only on the length.
    private static func matches(_ code: HashedAuthenticationCode<SHA256>, _ presented: UnsafeRawBufferPointer) -> Bool {
        code.withUnsafeBytes { expected in
            var difference: UInt8 = 0
            for index in 0..<presented.count { difference |= expected[index] ^ presented[index] }
            return difference == 0
        }
    }
}

/// The HMAC states keyed for the current and the previous cookie epoch, made once per epoch
/// and shared by every event loop.
private final class EpochKeyCache: @unchecked Sendable {
    // @unchecked: `cached` is only read and written under `lock`; HMAC states are plain values.
    struct Keys {
        let epoch: UInt64
        let current: HMAC<SHA256>
        let previous: HMAC<SHA256>
    }

    private let lock = Mutex(())
    private var cached: Keys?

    func keys(for epoch: UInt64, secret: SymmetricKey) -> Keys {
        lock.withLock { _ in
            if let cached, cached.epoch == epoch { return cached }
            let keys = Keys(epoch: epoch, current: Self.prepared(epoch, secret), previous: Self.prepared(epoch &- 1, secret))
            cached = keys
            return keys
        }
    }

    private static func prepared(_ epoch: UInt64, _ secret: SymmetricKey) -> HMAC<SHA256> {
        let epochBytes = withUnsafeBytes(of: epoch.bigEndian, Array.init)
        return HMAC<SHA256>(key: SymmetricKey(data: HMAC<SHA256>.authenticationCode(for: epochBytes, using: secret)))
    }
}

/// Compares two byte strings in time that depends only on their length.
func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    var difference: UInt8 = 0
    for index in a.indices { difference |= a[index] ^ b[index] }
    return difference == 0
}
