import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Stateless address cookies: proof that a client receives at the address it sends from,
/// before the relay spends a Diffie-Hellman operation or sends anything large to it.
///
/// A cookie is HMAC-SHA256(epoch key, address)[0..<16], where the epoch key is derived from
/// the relay's secret and the current minute. It is valid in its minute and the next, so a
/// cookie lives 60–120 seconds, and nothing has to be stored or shared between event
/// loops. The handshake replay cache covers the same two minutes, so a captured handshake
/// can be replayed neither within the window (cache) nor after it (cookie).
public struct AddressCookieMinter: Sendable {
    public static let epochSeconds: UInt64 = 60
    private let secret: SymmetricKey

    public init(secret: SymmetricKey = SymmetricKey(size: .bits256)) {
        self.secret = secret
    }

    public static func epoch(unixSeconds: UInt64) -> UInt64 { unixSeconds / epochSeconds }

    public func cookie(for address: some DataProtocol, unixSeconds: UInt64) -> [UInt8] {
        cookie(for: address, epoch: Self.epoch(unixSeconds: unixSeconds))
    }

    public func isValid(_ cookie: some DataProtocol, for address: some DataProtocol, unixSeconds: UInt64) -> Bool {
        let epoch = Self.epoch(unixSeconds: unixSeconds)
        let presented = Array(cookie)
        return [epoch, epoch &- 1].contains { candidate in
            constantTimeEqual(self.cookie(for: address, epoch: candidate), presented)
        }
    }

    private func cookie(for address: some DataProtocol, epoch: UInt64) -> [UInt8] {
        var epochBytes = [UInt8](repeating: 0, count: 8)
        withUnsafeBytes(of: epoch.bigEndian) { epochBytes = Array($0) }
        let epochKey = SymmetricKey(data: HMAC<SHA256>.authenticationCode(for: epochBytes, using: secret))
        return Array(HMAC<SHA256>.authenticationCode(for: Array(address), using: epochKey).prefix(16))
    }
}

/// Compares two byte strings in time that depends only on their length.
func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    var difference: UInt8 = 0
    for index in a.indices { difference |= a[index] ^ b[index] }
    return difference == 0
}
