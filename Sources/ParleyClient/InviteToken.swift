import ParleyBasics

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What a client reads of its own access token. The token is the relay's to check (its
/// signature, times, room); the client reads one claim of it, unverified, because it is the
/// person's own invite: whether the room must be end-to-end encrypted (`e2ee`). A relay that
/// then confirms a room without end-to-end encryption is left before anything is sent.
public enum InviteToken {
    public static func asksForEndToEndEncryption(_ token: String) -> Bool {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = Base64URL.decode(parts[1]),
              let claims = try? JSONDecoder().decode(Claims.self, from: Data(payload)) else { return false }
        return claims.e2ee ?? false
    }

    private struct Claims: Decodable {
        var e2ee: Bool?
    }
}
