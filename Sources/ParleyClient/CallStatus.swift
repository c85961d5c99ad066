import ParleyWire
import Synchronization

/// The call as the person sees it — its phase, the room, the relay's figures, texts, devices —
/// behind one small lock, written by the network loop and the audio threads when something
/// changes and read by the status line, `parley ctl` and the summary. Nothing here is on a
/// packet's path: what the capture thread needs for each frame is the ``MediaGate``.
final class CallStatus: Sendable {
    struct State: Sendable {
        /// The encoder's bitrate now (the capture thread writes it when the setting changes).
        var currentBitrate: Int
        var phase = CallPhase.joining
        var rejoins = 0
        var identity: String?
        var members: [String] = []
        /// Each member's muted/deafened state, as the relay's roster last said.
        var memberStates: [String: ControlMessage.MemberState] = [:]
        /// The room's text messages, oldest first (at most ``RoomText/kept``).
        var texts: [RoomText] = []
        /// Members a moderator muted for everyone (the relay drops their audio), ourselves included.
        var serverMuted: [String] = []
        var roundTripNanoseconds: UInt64?
        /// The relay's latest fraction lost on our upstream, and over the whole call.
        var lossUp: Double?
        var lossUpTotal: Double?
        var captureStartedAt: UInt64?
        var playbackStartedAt: UInt64?
        var inputEnded = false
        /// "microphone", "speaker": sound devices that stopped working and are awaited.
        var missingDevices: Set<String> = []
        /// The room's end-to-end encryption as people see it; nil in a room without.
        var endToEnd: EndToEndStatus?
    }

    let state: Mutex<State>

    init(initialBitrate: Int) {
        state = Mutex(State(currentBitrate: initialBitrate))
    }

    func update<Result>(_ body: (inout State) -> Result) -> Result { state.withLock { body(&$0) } }
    var snapshot: State { state.withLock { $0 } }
}

/// Where a call is, for the status line.
public enum CallPhase: String, Sendable, Codable {
    case joining
    case inCall = "in call"
    case reconnecting
    case leaving
    case ended
}
