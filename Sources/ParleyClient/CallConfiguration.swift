import NIOCore
import ParleyBasics
import ParleyAudio
import ParleyDevices
import ParleyE2EE
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

    /// End-to-end encryption: this person's identity and pinned keys; nil takes no part (an
    /// end-to-end encrypted room then refuses the join).
    public var endToEnd: EndToEndIdentity?

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

/// What a call needs to take part in end-to-end encrypted rooms.
public struct EndToEndIdentity: Sendable {
    /// The person's long-term identity key (``IdentityKey/loadOrCreate(at:)``).
    public var identity: IdentityKey
    /// The keys pinned on first sight, and the file they are kept in (nil: kept for this call only).
    public var pins: IdentityPins
    public var pinsPath: String?
    /// The invite asks for an end-to-end encrypted room: a relay that does not make the room so
    /// is left at once, and nothing is sent before the join confirms it.
    public var required: Bool

    public init(identity: IdentityKey, pins: IdentityPins = IdentityPins(), pinsPath: String? = nil, required: Bool) {
        self.identity = identity
        self.pins = pins
        self.pinsPath = pinsPath
        self.required = required
    }
}

extension EndToEndIdentity {
    /// The identity at `path` (else the default in the person's config folder), made there on
    /// first use, with the pins kept beside it (`known-keys`); `token` says whether the room
    /// must be end-to-end encrypted. Nil when no path is given and there is no home folder to
    /// keep one in, and the room does not require it: the call then takes no part.
    public static func load(path: String?, token: String, environment: [String: String],
                            notice: (String) -> Void = { _ in }) throws(CallError) -> EndToEndIdentity? {
        let required = InviteToken.asksForEndToEndEncryption(token)
        guard let path = path ?? IdentityKey.defaultPath(environment: environment) else {
            if required {
                throw .identity("this room is end-to-end encrypted and needs an identity key, but there is no home folder to keep one in; give --identity FILE")
            }
            return nil
        }
        let identity: IdentityKey
        do {
            let (key, created) = try IdentityKey.loadOrCreate(at: path)
            identity = key
            if created { notice("made your identity for end-to-end encrypted rooms in \(path) (fingerprint \(Fingerprint.of(key.publicKeyBytes)))") }
        } catch {
            throw .identity("\(error)")
        }
        let folder = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        let pinsPath = (folder.isEmpty ? "" : folder) + "/known-keys"
        let pins: IdentityPins
        do { pins = try IdentityPins.load(path: pinsPath) } catch { throw .identity("\(error)") }
        return EndToEndIdentity(identity: identity, pins: pins, pinsPath: pinsPath, required: required)
    }
}
