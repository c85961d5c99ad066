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
