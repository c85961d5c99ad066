import NIOCore
import ParleyBasics
import ParleyAudio
import ParleyDevices
import ParleyWire

/// Everything one call needs, as `parley call` or a test builds it.
public struct CallConfiguration: Sendable {
    /// Where captured audio comes from.
    public enum Input: Sendable {
        /// An ALSA capture PCM by name (`default` follows the sound server), optionally
        /// defined by ALSA configuration text of the caller's (`pcm.NAME { … }`).
        case alsa(device: String, configuration: String? = nil)
        /// A WAV file of any rate and channel count, resampled to 48 kHz mono and played
        /// into the call in real time, like a microphone.
        case wav(path: String)
        /// A device the caller built (the tests' echo path).
        case device(any AudioInput)
    }

    /// Where the mix of the others goes.
    public enum Output: Sendable {
        case alsa(device: String, configuration: String? = nil)
        /// A WAV file, written in real time (48 kHz mono, 16-bit).
        case wav(path: String)
        case device(any AudioOutput)
    }

    /// Echo cancellation on the outgoing stream.
    public enum EchoCancellation: String, Sendable, CaseIterable {
        case on, off
        /// On for a sound-card input (it hears the speaker), off for a WAV input (it cannot).
        case auto
    }

    /// The relay and the room: from an invite or from the flags.
    public var relayHost: String
    public var relayPort: Int
    public var room: String
    public var token: String
    public var security: RelayLink.Security
    /// How this client labels itself (status lines, the summary, RTCP SDES NAME); the
    /// identity others see is the one the token names.
    public var name: String?
    /// The SSRC this client sends from; random unless a test fixes it.
    public var ssrc: UInt32 = UInt32.random(in: 1...UInt32.max)

    public var input: Input = .alsa(device: "default")
    public var output: Output = .alsa(device: "default")
    public var echoCancellation: EchoCancellation = .auto
    /// Noise suppression on the outgoing stream.
    public var denoise = true
    /// The encoder's bitrate ceiling, bits per second; see `EncoderAdaptation`.
    public var maximumBitrate = 32_000
    /// Where the call listens for `parley ctl` (see `ControlSocketPath`); nil: no control socket.
    public var controlSocketPath: String?
    /// The call ends after this many seconds of audio (nil: until stopped, or a WAV input ends).
    public var durationSeconds: Double?

    /// The capture as read from the device, before any processing.
    public var recordRawPath: String?
    /// What is sent: the processed signal handed to the encoder (before Opus).
    public var recordSentPath: String?
    /// One WAV per remote speaker, before the mix, on this client's playback timeline.
    public var recordReceivedDirectory: String?

    /// Diagnostics: every RTP packet sent and received, written as a `PacketTrace`.
    public var packetTracePath: String?
    /// Diagnostics: every RTP packet received from another member, once opened, is also sent
    /// as it arrives to these UDP addresses on this machine, so a second receiver (a
    /// GStreamer pipeline, say) can play exactly what this one got.
    public var receivedRTPCopies: [SocketAddress] = []

    public var jitterBuffer = JitterBuffer.Configuration()
    /// Adjusts the link's timings (join timeout, keepalive probing); the tests shorten them.
    public var tuneLink: @Sendable (inout RelayLink.Configuration) -> Void = { _ in }

    public init(relayHost: String, relayPort: Int, room: String, token: String, security: RelayLink.Security) {
        self.relayHost = relayHost
        self.relayPort = relayPort
        self.room = room
        self.token = token
        self.security = security
    }

    /// "host:port", with brackets around an IPv6 address.
    public var relay: String { HostPortText.format(host: relayHost, port: relayPort) }

    /// Whether the echo canceller runs, once `auto` is resolved.
    public var cancelsEcho: Bool {
        switch echoCancellation {
        case .on: return true
        case .off: return false
        case .auto:
            if case .wav = input { return false }
            return true
        }
    }
}
