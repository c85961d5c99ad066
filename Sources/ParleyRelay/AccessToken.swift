import Crypto
import ParleyBasics
import ParleyWire

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// An access token: a standard JSON Web Token (RFC 7519) signed with HMAC-SHA256 ("HS256",
/// RFC 7518 §3.2), so that a web application can mint one with any JWT library.
///
/// ```
/// base64url({"alg":"HS256","typ":"JWT"}) . base64url(claims) . base64url(HMAC-SHA256(secret, header.claims))
/// claims: {"sub": identity, "room": room, "iat": issued, "exp": expires, "nbf": not before (optional),
///          "pub": may publish (optional, default true), "mod": moderator (optional, default false),
///          "region": where a cluster should place the room if it is new (optional),
///          "e2ee": the room is end-to-end encrypted (optional, default false)}
/// ```
///
/// Verification is written here with swift-crypto's `HMAC<SHA256>` rather than with
/// vapor/jwt-kit: jwt-kit's API is async-only and brings a large dependency tree, while the
/// relay checks a token synchronously on its event loop for every join, and HS256 alone is
/// a split, two base64 decodes, one JSON decode and one constant-time MAC comparison.
public struct AccessToken: Sendable, Hashable {
    /// The member's name in the room (`sub`).
    public var identity: String
    public var room: String
    /// Seconds since 1970 (`iat`, `exp`, `nbf`).
    public var issuedAt: Int64
    public var expiresAt: Int64
    public var notBefore: Int64?
    /// Whether the member may send media (`pub`).
    public var canPublish: Bool
    /// Whether the member may server-mute, kick and close the room (`mod`). Absent in tokens
    /// minted before the claim existed, and by web apps that do not know it: false.
    public var isModerator: Bool
    /// The region a cluster should place the room in, if it is new and a relay serves it (`region`).
    public var region: String?
    /// The room is end-to-end encrypted (`e2ee`): a new room is made so, a room running
    /// without it refuses the join, and the client insists on it.
    public var endToEndEncrypted: Bool

    /// Longer tokens are refused before any decoding, so a hostile join costs little.
    public static let maximumEncodedLength = 4096
    /// Clocks of the minting web app and the relay may disagree by this much.
    public static let clockSkewToleranceSeconds: Int64 = 30

    public init(identity: String, room: String, issuedAt: Int64, expiresAt: Int64, notBefore: Int64? = nil, canPublish: Bool = true,
                isModerator: Bool = false, region: String? = nil, endToEndEncrypted: Bool = false) {
        self.region = region
        self.endToEndEncrypted = endToEndEncrypted
        self.identity = identity
        self.room = room
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.notBefore = notBefore
        self.canPublish = canPublish
        self.isModerator = isModerator
    }

    // MARK: Minting

    private static let encodedHeader = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))

    /// The compact serialisation, signed with `secret`.
    public func signed(with secret: TokenSecret) -> String {
        let claims = Claims(sub: identity, room: room, iat: Double(issuedAt), exp: Double(expiresAt),
                            nbf: notBefore.map(Double.init), pub: canPublish ? nil : false, mod: isModerator ? true : nil, region: region,
                            e2ee: endToEndEncrypted ? true : nil)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let payload = Base64URL.encode(Array(try! encoder.encode(claims)))  // plain strings and numbers always encode
        let signingInput = Self.encodedHeader + "." + payload
        let mac = HMAC<SHA256>.authenticationCode(for: Array(signingInput.utf8), using: secret.key)
        return signingInput + "." + Base64URL.encode(Array(mac))
    }

    // MARK: Verifying

    /// Checks the token's form, signature, validity period, room and identity, in that order,
    /// and returns its claims. `now` is seconds since 1970.
    public static func verify(_ token: String, secret: TokenSecret, room: String, now: Int64) throws(Failure) -> AccessToken {
        let claimed = try verifiedClaims(token, secret: secret)
        let tolerance = clockSkewToleranceSeconds
        if now >= claimed.expiresAt &+ tolerance {
            throw .expired(expiresAt: claimed.expiresAt, now: now)
        }
        if let notBefore = claimed.notBefore, now &+ tolerance < notBefore {
            throw .notYetValid(notBefore: notBefore, now: now)
        }
        guard claimed.room == room else { throw .wrongRoom(tokenRoom: claimed.room, requestedRoom: room) }
        if let problem = ParleyNames.problem(withIdentity: claimed.identity) {
            throw .identityInvalid(problem: problem)
        }
        return claimed
    }

    /// Form and signature only: the claims of a token this secret signed.
    static func verifiedClaims(_ token: String, secret: TokenSecret) throws(Failure) -> AccessToken {
        let bytes = Array(token.utf8)
        guard !bytes.isEmpty else { throw .malformed(reason: "the token is empty") }
        guard bytes.count <= maximumEncodedLength else {
            throw .malformed(reason: "the token is longer than \(maximumEncodedLength) bytes")
        }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed(reason: "a token has three parts separated by '.'") }
        guard let headerJSON = Base64URL.decode(parts[0]), let header = try? JSONDecoder().decode(Header.self, from: Data(headerJSON)) else {
            throw .malformed(reason: "the token's header is not base64url JSON")
        }
        guard header.alg == "HS256" else {
            // "none", RS256 and the rest are refused: the relay knows only its shared secret.
            throw .malformed(reason: "the token is signed with \(header.alg.prefix(16)); the relay accepts only HS256")
        }
        guard let signature = Base64URL.decode(parts[2]), signature.count == SHA256.byteCount else {
            throw .malformed(reason: "the token's signature is not a base64url HMAC-SHA256")
        }
        let signingInput = bytes[..<(parts[0].count + 1 + parts[1].count)]
        // isValidAuthenticationCode compares in constant time.
        guard HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: signingInput, using: secret.key) else {
            throw .signatureInvalid
        }
        guard let claimsJSON = Base64URL.decode(parts[1]), let claims = try? JSONDecoder().decode(Claims.self, from: Data(claimsJSON)) else {
            throw .malformed(reason: "the token's claims are not base64url JSON with sub, room and exp")
        }
        guard let expires = Self.seconds(claims.exp), let issued = Self.seconds(claims.iat ?? 0) else {
            throw .malformed(reason: "the token's exp or iat is not a time in seconds")
        }
        var notBefore: Int64?
        if let nbf = claims.nbf {
            guard let value = Self.seconds(nbf) else { throw .malformed(reason: "the token's nbf is not a time in seconds") }
            notBefore = value
        }
        return AccessToken(identity: claims.sub, room: claims.room, issuedAt: issued, expiresAt: expires,
                           notBefore: notBefore, canPublish: claims.pub ?? true, isModerator: claims.mod ?? false,
                           region: claims.region.flatMap { ParleyNames.problem(withRegion: $0) == nil ? $0 : nil },
                           endToEndEncrypted: claims.e2ee ?? false)
    }

    /// JWT NumericDate: seconds, possibly fractional; refuses NaN and values no clock reaches.
    private static func seconds(_ value: Double) -> Int64? {
        guard value.isFinite, value >= 0, value < 1e15 else { return nil }
        return Int64(value)
    }

    private struct Header: Codable {
        var alg: String
    }

    private struct Claims: Codable {
        var sub: String
        var room: String
        var iat: Double?
        var exp: Double
        var nbf: Double?
        var pub: Bool?
        var mod: Bool?
        var region: String?
        var e2ee: Bool?
    }

    /// Why a token was refused. Each case has its own error code for the client, a message
    /// for the person using it, and a reason for the relay's log (never the token or secret).
    public enum Failure: Error, Sendable, Hashable, CustomStringConvertible {
        case malformed(reason: String)
        case signatureInvalid
        case expired(expiresAt: Int64, now: Int64)
        case notYetValid(notBefore: Int64, now: Int64)
        case wrongRoom(tokenRoom: String, requestedRoom: String)
        case identityInvalid(problem: String)

        public var errorCode: ControlMessage.ErrorCode {
            switch self {
            case .malformed: return .tokenMalformed
            case .signatureInvalid: return .tokenSignatureInvalid
            case .expired: return .tokenExpired
            case .notYetValid: return .tokenNotYetValid
            case .wrongRoom: return .tokenWrongRoom
            case .identityInvalid: return .tokenIdentityInvalid
            }
        }

        /// Sent to the client: what is wrong and what to do.
        public var message: String {
            switch self {
            case let .malformed(reason):
                return "the access token is malformed (\(reason))"
            case .signatureInvalid:
                return "the access token was not signed by this relay's secret"
            case let .expired(expiresAt, now):
                return "the access token expired \(Self.age(now - expiresAt)) ago"
            case let .notYetValid(notBefore, now):
                return "the access token is valid only in \(Self.age(notBefore - now))"
            case let .wrongRoom(tokenRoom, requestedRoom):
                return "the access token is for room \"\(tokenRoom.prefix(64))\", not \"\(requestedRoom.prefix(64))\""
            case let .identityInvalid(problem):
                return "the access token's identity is not allowed: \(problem)"
            }
        }

        /// For the log: the reason alone.
        public var description: String {
            switch self {
            case let .malformed(reason): return "malformed token: \(reason)"
            case .signatureInvalid: return "bad token signature"
            case let .expired(expiresAt, now): return "token expired \(now - expiresAt) s ago"
            case let .notYetValid(notBefore, now): return "token not valid for another \(notBefore - now) s"
            case let .wrongRoom(tokenRoom, requestedRoom): return "token for room \(tokenRoom.prefix(64)) used to join \(requestedRoom.prefix(64))"
            case let .identityInvalid(problem): return "token identity invalid: \(problem)"
            }
        }

        static func age(_ seconds: Int64) -> String {
            if seconds < 120 { return "\(max(seconds, 0)) s" }
            if seconds < 7200 { return "\(seconds / 60) min" }
            if seconds < 172_800 { return "\(seconds / 3600) h" }
            return "\(seconds / 86_400) days"
        }
    }
}
