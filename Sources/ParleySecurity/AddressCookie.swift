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
    private let secret: SymmetricKey
    private let epochKeys: EpochKeyCache

    public init(secret: SymmetricKey = SymmetricKey(size: .bits256)) {
        self.secret = secret
        epochKeys = EpochKeyCache()
    }

    public static func epoch(unixSeconds: UInt64) -> UInt64 { unixSeconds / epochSeconds }

    public func cookie(for address: some DataProtocol, unixSeconds: UInt64) -> [UInt8] {
        let keys = epochKeys.keys(for: Self.epoch(unixSeconds: unixSeconds), secret: secret)
        return Array(HMAC<SHA256>.authenticationCode(for: address, using: keys.current).prefix(16))
    }

    public func isValid(_ cookie: some DataProtocol, for address: some DataProtocol, unixSeconds: UInt64) -> Bool {
        guard cookie.count == 16 else { return false }
        let keys = epochKeys.keys(for: Self.epoch(unixSeconds: unixSeconds), secret: secret)
        return constantTimeEqualPrefix(HMAC<SHA256>.authenticationCode(for: address, using: keys.current), cookie)
            || constantTimeEqualPrefix(HMAC<SHA256>.authenticationCode(for: address, using: keys.previous), cookie)
    }
}

/// The keys of the current and the previous cookie epoch, made once per epoch and shared by
/// every event loop.
private final class EpochKeyCache: Sendable {
    struct Keys: Sendable {
        let epoch: UInt64
        let current: SymmetricKey
        let previous: SymmetricKey
    }

    private let cached = Mutex<Keys?>(nil)

    func keys(for epoch: UInt64, secret: SymmetricKey) -> Keys {
        if let keys = cached.withLock({ $0 }), keys.epoch == epoch { return keys }
        let keys = Keys(epoch: epoch, current: Self.key(epoch, secret), previous: Self.key(epoch &- 1, secret))
        cached.withLock { $0 = keys }
        return keys
    }

    private static func key(_ epoch: UInt64, _ secret: SymmetricKey) -> SymmetricKey {
        let epochBytes = withUnsafeBytes(of: epoch.bigEndian, Array.init)
        return SymmetricKey(data: HMAC<SHA256>.authenticationCode(for: epochBytes, using: secret))
    }
}

/// Whether `presented` equals the first bytes of `code`, in time that depends only on the length.
private func constantTimeEqualPrefix(_ code: HashedAuthenticationCode<SHA256>, _ presented: some DataProtocol) -> Bool {
    code.withUnsafeBytes { expected in
        var difference: UInt8 = 0
        for (index, byte) in presented.enumerated() { difference |= expected[index] ^ byte }
        return difference == 0
    }
}

/// Compares two byte strings in time that depends only on their length.
func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    var difference: UInt8 = 0
    for index in a.indices { difference |= a[index] ^ b[index] }
    return difference == 0
}
