import ParleyWire

/// Why a member left the room.
enum RemovalReason: CaseIterable, Hashable, Sendable {
    case left, idleTimeout, replaced, neverReady, shutdown
    /// A member on another relay of the room holds the same SSRC and keeps it (`Room+Trunks.swift`).
    case ssrcClash
    /// A moderator or the relay's operator removed the member, or closed its room.
    case kicked, roomClosed
    /// A browser member's DTLS handshake failed, or its page closed the call.
    case browserTransportFailed

    var label: String {
        switch self {
        case .left: return "left"
        case .idleTimeout: return "idle_timeout"
        case .replaced: return "replaced"
        case .neverReady: return "never_ready"
        case .shutdown: return "shutdown"
        case .ssrcClash: return "ssrc_clash"
        case .kicked: return "kicked"
        case .roomClosed: return "room_closed"
        case .browserTransportFailed: return "browser_transport_failed"
        }
    }
}

/// What the member is told, when it is told anything.
extension RemovalReason {
    var goodbye: ControlMessage.GoodbyeReason? {
        switch self {
        case .idleTimeout: return .idleTimeout
        case .replaced: return .replaced
        case .shutdown: return .relayShuttingDown
        // The client reconnects, finds its SSRC taken, and picks another.
        case .ssrcClash: return .unknown
        case .kicked: return .kicked
        case .roomClosed: return .roomClosed
        case .left, .neverReady: return nil
        case .browserTransportFailed: return .unknown
        }
    }

    var goodbyeText: String {
        switch self {
        case .idleTimeout: return "nothing heard from you for the idle timeout; join again"
        case .replaced: return "you joined this room again from another session"
        case .shutdown: return "the relay is shutting down; join again when it is back"
        case .ssrcClash: return "a member of this room on another relay has your stream's SSRC; joining again with a new one"
        case .kicked: return "you were removed from the room"
        case .roomClosed: return "the room was closed"
        case .browserTransportFailed: return "the secure connection to your browser failed; reload the page to join again"
        case .left, .neverReady: return ""
        }
    }
}
