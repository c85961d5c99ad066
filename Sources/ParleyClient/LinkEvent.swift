import ParleyWire

/// What the link to the relay tells the call, for its status line and its decisions.
public enum LinkEvent: Sendable, Equatable {
    /// Joined (or rejoined) and the first roster arrived: media may flow.
    case joined(identity: String, room: String, canPublish: Bool, rejoin: Bool)
    /// The room's members, identity ↔ SSRC, ourselves included.
    case roster([ControlMessage.Roster.Member])
    /// A round trip to the relay and back, measured by ping/pong.
    case roundTrip(nanoseconds: UInt64)
    /// The link was lost or the relay went away; the link is rejoining by itself.
    case reconnecting(reason: String)
    /// The relay does not host the room; the link joins the relay that does, at this address.
    case redirected(to: String)
    /// The link gave up for good; the call should end with this failure.
    case failed(LinkFailure)
    /// The member left cleanly (the relay acknowledged, or the wait for it ended).
    case left
    /// A text from another member, as sent (the call neutralises it before showing it).
    case text(sender: String, text: String)
    /// The relay refused a text of ours, saying why.
    case textRefused(text: String, reason: String)
    /// Another member's media keys, sealed for us (end-to-end encryption).
    case mediaKeys(ControlMessage.MediaKeys)
    /// From the call's end-to-end encryption rather than the link: something about keys the
    /// person must be told.
    case endToEnd(EndToEndNotice)
    /// The relay answered a moderation request (``RelayLink/moderate(_:now:)``), or the link
    /// gave up waiting for the answer (outcome `.unknown`).
    case moderationAnswered(sequence: UInt32, ControlMessage.ModerationReply)
}

/// Why a link ended for good. Each has its own exit code so scripts can tell them apart.
public enum LinkFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// Nothing answered within the join timeout.
    case unreachable(relay: String, seconds: Int)
    /// The relay answered the address check but not the handshake: the key differs.
    case handshakeUnanswered(relay: String)
    /// The relay presented a key other than the one pinned in the invite.
    case relayKeyMismatch(relay: String)
    /// The first join got no cookie, only plaintext replies echoing our hello that say the
    /// relay runs without encryption (unauthenticated, so never acted on alone or at once).
    case relayWithoutEncryption(relay: String)
    /// The relay refused the join (token, room full, …).
    case refused(code: ControlMessage.ErrorCode, message: String)
    /// Another session with the same identity joined the room.
    case replaced
    /// A moderator removed us (`kicked`) or closed the room (`roomClosed`); `message` is the
    /// relay's words: who, why, and for how long.
    case removed(ControlMessage.GoodbyeReason, message: String)
    /// The invite asks for an end-to-end encrypted room (or the call's earlier joins had one)
    /// and the relay confirmed a room without it, or let us into one we cannot take part in.
    case endToEndEncryptionMissing

    public var description: String {
        switch self {
        case let .unreachable(relay, seconds):
            return "the relay at \(relay) did not answer for \(seconds) s: check the address and port, "
                + "that the relay is running, and that UDP to it is not blocked by a firewall"
        case let .handshakeUnanswered(relay):
            return "the relay at \(relay) answers but does not accept the encrypted handshake: "
                + "its key is probably not the one in your invite; ask for a fresh invite"
        case let .relayKeyMismatch(relay):
            return "the relay at \(relay) presented a different key from the one in your invite, so Parley "
                + "refused to talk to it (the invite is stale, or someone is intercepting); ask for a fresh invite"
        case let .relayWithoutEncryption(relay):
            return "the relay at \(relay) did not answer the encrypted handshake; something answering from its address "
                + "said, unauthenticated, that it runs without encryption. If it is your relay, start it without --insecure; "
                + "otherwise ask its owner whether it runs encrypted, and for a fresh invite"
        case let .refused(code, message):
            return Self.explain(code, message)
        case .replaced:
            return "you joined this room from somewhere else, so this session was closed"
        case let .removed(reason, message):
            let what = reason == .roomClosed ? "the room was closed" : "you were removed from the room"
            return message.isEmpty ? what : "\(what): \(message)"
        case .endToEndEncryptionMissing:
            return "the relay did not make this room end-to-end encrypted although your invite (or this call until now) "
                + "requires it, so Parley left before sending anything (an old relay, or one that should not be trusted); "
                + "ask the room's owner for a fresh invite"
        }
    }

    /// The status the call exits with for this failure (``CallExitStatus``).
    public var exitStatus: CallExitStatus {
        switch self {
        case .unreachable: return .unreachable
        case .handshakeUnanswered, .relayKeyMismatch, .relayWithoutEncryption: return .relayKey
        case let .refused(code, _):
            switch code {
            case .encryptionRequired, .encryptionUnavailable: return .relayKey
            case .tokenMalformed, .tokenSignatureInvalid, .tokenExpired, .tokenNotYetValid, .tokenWrongRoom,
                 .tokenIdentityInvalid, .publishNotAllowed:
                return .tokenRefused
            case .roomFull, .tooManyRooms: return .roomFull
            case .endToEndEncryptionRequired: return .endToEnd
            case .kickedFromRoom: return .removed
            default: return .refused
            }
        case .replaced: return .replaced
        case let .removed(reason, _): return reason == .roomClosed ? .roomClosed : .removed
        case .endToEndEncryptionMissing: return .endToEnd
        }
    }

    public var exitCode: Int32 { exitStatus.rawValue }

    /// The relay's words say what happened; what to do is said here, once.
    private static func explain(_ code: ControlMessage.ErrorCode, _ message: String) -> String {
        let relaySays = message.isEmpty ? "" : " (relay: \(message))"
        switch code {
        case .tokenExpired: return "your access token has expired\(relaySays); ask for a new invite"
        case .tokenNotYetValid: return "your access token is not valid yet\(relaySays); check this computer's clock, or wait"
        case .tokenSignatureInvalid:
            return "the relay did not accept your token's signature\(relaySays): it was minted for another relay or with an old secret; ask for a new invite"
        case .tokenMalformed: return "the relay could not read your token\(relaySays); copy the whole invite again"
        case .tokenWrongRoom: return "your token is for another room\(relaySays); use the room the invite names"
        case .tokenIdentityInvalid: return "the name in your token is not allowed\(relaySays); ask for a new invite"
        case .roomFull: return "the room is full\(relaySays); try again later, or ask the relay's owner to raise the limit"
        case .tooManyRooms: return "the relay has as many rooms as it allows\(relaySays); try again later"
        case .publishNotAllowed: return "your token does not allow you to speak in this room\(relaySays)"
        case .ssrcInUse: return "the relay kept refusing the join because another member uses the same stream ID\(relaySays); try again"
        case .rateLimited: return "the relay is turning away joins from you for now\(relaySays); wait a minute and try again"
        case .encryptionRequired:
            return "the relay accepts encrypted clients only\(relaySays); use an invite that carries the relay's key (key=…) and leave out --insecure"
        case .encryptionUnavailable:
            return "the relay runs without encryption\(relaySays); ask its owner to run it encrypted"
        case .kickedFromRoom:
            return "you may not rejoin this room yet: \(message.isEmpty ? "a moderator removed you" : message)"
        case .endToEndEncryptionRequired:
            return "the room is end-to-end encrypted and this client cannot take part\(relaySays); update parley"
        case .placementUnavailable:
            return "the relay's cluster could not give the room a place while the call tried to join\(relaySays); "
                + "try again in a minute, and tell the relay's owner if it persists"
        default: return "the relay refused the join: \(message.isEmpty ? "error \(code.rawValue)" : message)"
        }
    }
}
