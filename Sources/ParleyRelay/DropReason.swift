/// Why the relay dropped a datagram; each is counted in `/metrics` under its `reason` label.
public enum DropReason: Int, CaseIterable, Sendable {
    /// From an address with no session (a stranger, a spoofed source, or a relay restart).
    case notJoined
    /// From a member that has not yet sent `ready`.
    case notActive
    /// An RTP or RTCP packet whose SSRC the sending member does not own.
    case foreignSSRC
    /// RTP, RTCP or control bytes that do not parse.
    case malformed
    /// Larger than `max-packet-size`.
    case oversize
    /// Over the member's packets-per-second limit (media, or RTCP and control).
    case rateLimited
    /// Media over the member's bytes-per-second limit (`max-member-bitrate`).
    case bitrateLimited
    /// A handshake or join over its source's or the loop's join budget (after a valid cookie).
    case joinRateLimited
    /// A hello over its source's or the loop's cookie-reply budget.
    case helloRateLimited
    /// Media from a member whose token does not allow publishing.
    case publishNotAllowed
    /// Neither RTP, RTCP nor a Parley control message (first byte outside RFC 7983's ranges).
    case unknownKind
    /// The socket's send buffer was full: shed, never queued without bound.
    case sendQueueFull
    /// The kernel refused to send to the receiver's address (unreachable, or an outgoing
    /// firewall rule).
    case sendFailed
    /// RTCP feedback the relay does not serve (generic NACK: no retransmission buffer).
    case nackNotServed
    /// A `ready` with the wrong cookie, or a control message that makes no sense in the session's state.
    case unexpectedControl
    /// Plaintext RTP, RTCP or control on a relay that requires encryption.
    case plaintextRefused
    /// A sealed packet that failed authentication: tampered, truncated, or sealed with other keys.
    case decryptFailed
    /// A sealed packet whose counter was seen before or is too far behind (the replay window).
    case replayed
    /// A handshake init that did not decrypt under the relay's key, or was malformed.
    case handshakeFailed
    /// A handshake init whose address cookie is wrong for its source or expired.
    case cookieInvalid
    /// A handshake init seen before that made no session here any more: a replay.
    case handshakeReplayed
    /// A trunk handshake from a relay whose key is not in the trusted-relay set.
    case trunkUntrusted
    /// A trunk init from an address no trusted relay is registered at (or to a relay that
    /// trusts no relay at all), dropped before any Diffie-Hellman.
    case trunkUnknownSource
    /// Media from a member a moderator server-muted.
    case serverMuted
    /// A STUN message the relay does not answer: not an authentic ICE check for a browser
    /// member's credentials (a stranger's, a forged one, or for an offer long gone).
    case stunUnanswered
    /// A DTLS record from an address no authentic ICE check came from, or one a browser
    /// member's handshake refused.
    case dtlsRefused
    /// A browser member's ClientHello while the cluster is still placing its room (or this
    /// relay has not yet seen where another put it): nothing is kept, and the browser's own
    /// retransmission of the hello asks again.
    case placementPending

    public var label: String {
        switch self {
        case .notJoined: return "not_joined"
        case .notActive: return "not_active"
        case .foreignSSRC: return "foreign_ssrc"
        case .malformed: return "malformed"
        case .oversize: return "oversize"
        case .rateLimited: return "rate_limited"
        case .bitrateLimited: return "bitrate_limited"
        case .joinRateLimited: return "join_rate_limited"
        case .helloRateLimited: return "hello_rate_limited"
        case .publishNotAllowed: return "publish_not_allowed"
        case .unknownKind: return "unknown_kind"
        case .sendQueueFull: return "send_queue_full"
        case .sendFailed: return "send_failed"
        case .nackNotServed: return "nack_not_served"
        case .unexpectedControl: return "unexpected_control"
        case .plaintextRefused: return "plaintext_refused"
        case .decryptFailed: return "decrypt_failed"
        case .replayed: return "replayed"
        case .handshakeFailed: return "handshake_failed"
        case .cookieInvalid: return "cookie_invalid"
        case .handshakeReplayed: return "handshake_replayed"
        case .trunkUntrusted: return "trunk_untrusted"
        case .trunkUnknownSource: return "trunk_unknown_source"
        case .serverMuted: return "server_muted"
        case .stunUnanswered: return "stun_unanswered"
        case .dtlsRefused: return "dtls_refused"
        case .placementPending: return "placement_pending"
        }
    }
}
