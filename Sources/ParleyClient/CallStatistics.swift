import Foundation

/// What a call reports: the live status line, the summary on exit, and `--stats-json`
/// (this structure encoded as JSON; the field names below are that file's documented keys).
public struct CallStatistics: Sendable, Codable, Equatable {
    /// One remote speaker as this client received them.
    public struct Speaker: Sendable, Codable, Equatable {
        /// Their identity (the hex SSRC until the roster names them).
        public var identity: String
        public var ssrc: UInt32
        /// RTP packets received, and lost on the way (RFC 3550 A.3, before any repair).
        public var packetsReceived: Int
        public var packetsLost: Int
        public var lossPercent: Double
        /// Lost frames rebuilt from the next packet's in-band FEC, and their share of the
        /// speaker's audio.
        public var fecRecoveredFrames: Int
        public var fecRecoveredPercent: Double
        /// Lost frames played from a redundant copy in a later packet (RFC 2198 RED), and
        /// their share of the speaker's audio.
        public var redundancyRecoveredFrames: Int = 0
        public var redundancyRecoveredPercent: Double = 0
        /// Frames concealed (Opus PLC) because they were lost (or came too late) and FEC
        /// could not rebuild them, and their share of the frames that were due.
        public var concealedFrames: Int
        public var concealedPercent: Double
        /// Times the jitter buffer ran dry waiting for late audio (the sender's DTX silences
        /// are not counted).
        public var underruns: Int
        public var latePackets: Int
        public var duplicatePackets: Int
        /// How long after its earliest possible arrival the audio now playing was
        /// scheduled, and what the buffer aims for.
        public var jitterBufferDelayMilliseconds: Double
        public var jitterBufferTargetMilliseconds: Double
        /// RFC 3550 interarrival jitter.
        public var networkJitterMilliseconds: Double
        /// Times the stream restarted (the sender rejoined, say).
        public var restarts: Int
        /// Frames of this speaker's that were due (decoded, rebuilt or concealed; not the
        /// comfort noise of their silences): what the percentages above are of.
        public var audioFrames: Double
        /// The jitter-buffer delay averaged over the seconds this speaker was heard.
        public var meanJitterBufferDelayMilliseconds: Double?
        /// Whether a packet from them arrived in the last second.
        public var receiving: Bool
        /// Audio the jitter buffer removed to bring its delay down (pitch periods of speech,
        /// parts of pauses), and added to raise it or to wait for a late packet, ms.
        public var acceleratedMilliseconds: Double? = nil
        public var stretchedMilliseconds: Double? = nil
        /// Their loudness in this client's mix as set here (`parley ctl volume`), percent.
        public var volumePercent: Int? = nil
        /// Their level as it arrives, dBFS (smoothed: falls 20 dB a second), and whether they
        /// are speaking now: the roster's meter.
        public var levelDecibels: Double? = nil
        public var speakingNow: Bool? = nil
    }

    /// This client's label (`--name`, else the identity).
    public var name: String
    public var identity: String?
    public var room: String
    public var phase: CallPhase
    /// Seconds since the call started (the first join).
    public var elapsedSeconds: Double
    /// Identities in the room, this client included.
    public var members: [String]
    /// Remote speakers heard within the last 0.3 s.
    public var speaking: [String]
    public var roundTripMilliseconds: Double?
    /// Our stream's loss on the way to the relay over the last report interval (its receiver
    /// reports) and over the whole call so far, percent.
    public var lossUpPercent: Double?
    public var lossUpTotalPercent: Double?
    /// Loss on the way to us, over every remote stream, percent (before repair).
    public var lossDownPercent: Double?
    /// The largest jitter-buffer delay among the speakers, ms.
    public var jitterBufferDelayMilliseconds: Double?
    /// Concealed share of all received audio, percent.
    public var concealedPercent: Double?
    /// The encoder's bitrate now, bits per second, and the loss its in-band FEC protects
    /// against (0: FEC off).
    public var bitrate: Int
    public var expectedLossPercent: Int
    /// Earlier frames each packet repeats (RFC 2198 RED) on top of the bitrate; 0: none.
    public var redundantFrames: Int = 0
    /// Sound devices that stopped working mid-call and are awaited ("microphone", "speaker").
    public var missingDevices: [String] = []
    public var captureXruns: Int
    public var playbackXruns: Int
    public var rejoins: Int
    public var packetsSent: Int
    public var bytesSent: Int
    /// CLOCK_MONOTONIC nanoseconds at which the first captured sample was read, and the
    /// first played sample handed to the device: the origins of `--record-raw`/`--input`
    /// and `--record-received`, which lets a tool on the same machine measure mouth-to-ear
    /// delay between two clients.
    public var captureStartedAtNanoseconds: UInt64?
    public var playbackStartedAtNanoseconds: UInt64?
    public var speakers: [Speaker]
    /// Muted, deafened, push-to-talk, as this member set them.
    public var controls: ControlState? = nil
    /// The members the relay says are muted (push-to-talk and not talking counts), and
    /// deafened, ourselves included: what everyone else sees of each.
    public var mutedMembers: [String]? = nil
    public var deafenedMembers: [String]? = nil
    /// The room's text messages, oldest first: the last ``RoomText/kept`` of the call.
    public var texts: [RoomText]? = nil
    /// Members a moderator muted for everyone (the relay drops their audio), this client
    /// included when it is one of them.
    public var serverMuted: [String]? = nil
    /// The room's end-to-end encryption (each member's fingerprint, key state and safety
    /// number); nil in a room without.
    public var endToEnd: EndToEndStatus? = nil

    /// Whether a moderator muted this client for everyone.
    public var isServerMuted: Bool { identity.map { serverMuted?.contains($0) ?? false } ?? false }

    /// The JSON written by `--stats-json` (pretty) and answered to `parley ctl status` (one line).
    public func json(pretty: Bool = true) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.prettyPrinted, .sortedKeys] : [.sortedKeys]
        return try encoder.encode(self)
    }
}

extension CallStatistics.Speaker {
    /// One speaker's figures over two streams, `earlier` then `later` (a rejoin between).
    static func merging(_ earlier: Self, _ later: Self) -> Self {
        var merged = later
        merged.packetsReceived += earlier.packetsReceived
        merged.packetsLost += earlier.packetsLost
        let expected = Double(merged.packetsReceived + merged.packetsLost)
        merged.lossPercent = expected > 0 ? 100 * Double(merged.packetsLost) / expected : 0
        merged.fecRecoveredFrames += earlier.fecRecoveredFrames
        merged.redundancyRecoveredFrames += earlier.redundancyRecoveredFrames
        merged.concealedFrames += earlier.concealedFrames
        let frames = earlier.audioFrames + later.audioFrames
        if frames > 0 {
            merged.fecRecoveredPercent = (earlier.fecRecoveredPercent * earlier.audioFrames + later.fecRecoveredPercent * later.audioFrames) / frames
            merged.redundancyRecoveredPercent = (earlier.redundancyRecoveredPercent * earlier.audioFrames
                + later.redundancyRecoveredPercent * later.audioFrames) / frames
            merged.concealedPercent = (earlier.concealedPercent * earlier.audioFrames + later.concealedPercent * later.audioFrames) / frames
        }
        merged.audioFrames = frames
        merged.underruns += earlier.underruns
        merged.latePackets += earlier.latePackets
        merged.duplicatePackets += earlier.duplicatePackets
        merged.restarts += earlier.restarts + 1
        switch (earlier.meanJitterBufferDelayMilliseconds, later.meanJitterBufferDelayMilliseconds) {
        case let (a?, b?): merged.meanJitterBufferDelayMilliseconds = (a + b) / 2
        case let (a, b): merged.meanJitterBufferDelayMilliseconds = a ?? b
        }
        return merged
    }
}
