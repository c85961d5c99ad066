import ParleyWire

/// Why a member left the room.
enum RemovalReason: CaseIterable, Hashable, Sendable {
    case left, idleTimeout, replaced, neverReady, shutdown

    var label: String {
        switch self {
        case .left: return "left"
        case .idleTimeout: return "idle_timeout"
        case .replaced: return "replaced"
        case .neverReady: return "never_ready"
        case .shutdown: return "shutdown"
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
        case .left, .neverReady: return nil
        }
    }

    var goodbyeText: String {
        switch self {
        case .idleTimeout: return "nothing heard from you for the idle timeout; join again"
        case .replaced: return "you joined this room again from another session"
        case .shutdown: return "the relay is shutting down; join again when it is back"
        case .left, .neverReady: return ""
        }
    }
}
