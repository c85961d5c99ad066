import ParleyWire
import Synchronization

/// What the call's threads tell each other, behind one small lock: whether media may be
/// sent (joined, and not muted), the encoder setting the network loop decided, what the capture thread has sent
/// (for the sender report), and the figures the status line shows.
final class CallShared: Sendable {
    struct State: Sendable {
        /// The link is joined and this member may publish: the capture thread sends.
        var mediaGate = false
        /// Bumped on every (re)join, so the capture thread starts a new talkspurt.
        var joinGeneration = 0
        /// Mute, deafen, push-to-talk: whether the person lets the microphone out.
        var controls = ControlState()
        /// The SSRC the link joined with (a new one if another member held ours); nil before joining.
        var ssrc: UInt32?
        var encoder: EncoderAdaptation.Setting
        var sender: RTCPReporter.SenderState?
        var packetsSent = 0
        var bytesSent = 0
        var framesEncoded = 0
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
        var capturedSamples = 0
        /// The room's end-to-end encryption as people see it; nil in a room without.
        var endToEnd: EndToEndStatus?
    }

    let state: Mutex<State>

    init(initialSetting: EncoderAdaptation.Setting) {
        state = Mutex(State(encoder: initialSetting, currentBitrate: initialSetting.bitrate))
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
