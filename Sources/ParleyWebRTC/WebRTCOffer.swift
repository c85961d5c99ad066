import ParleyWire

/// What the relay takes from a browser's SDP offer (RFC 8829 §5.2): one BUNDLE transport
/// (ICE credentials, the DTLS fingerprint), the section that carries the person's
/// microphone, and the sections (slots) that will each carry one other member's voice.
///
/// Only audio with Opus over `UDP/TLS/RTP/SAVPF` and rtcp-mux is taken; any other section is
/// rejected in the answer (port 0), and an offer with nothing the relay can use is refused
/// with a reason a person can act on.
public struct WebRTCOffer: Sendable, Hashable {
    public var description: SessionDescription
    /// The browser's ICE credentials (RFC 8839 §5.4).
    public var iceUsernameFragment: String
    public var icePassword: String
    /// The browser's certificate, as SHA-256.
    public var fingerprint: CertificateFingerprint
    /// How the browser numbers Opus, RED (if it offers RED around that Opus) and the audio
    /// level extension (if it offers it).
    public var opusPayloadType: UInt8
    public var redPayloadType: UInt8?
    public var audioLevelExtensionID: UInt8?
    /// How the browser numbers the MID extension (RFC 8843 §15), if it offers it in the
    /// one-byte range: the relay writes it into each copy to say which slot a voice is on.
    public var midExtensionID: UInt8?
    /// The section the browser sends its microphone on, and the SSRC it sends with.
    public var sendingMid: String?
    public var sendingSSRC: UInt32?
    /// Sections the relay can send on (recvonly or sendrecv at the browser), in order.
    public var receivingMids: [String]
    /// The receiving sections other than the one the browser sends on, each one other member's
    /// voice at a time (at most ``maximumSlots``, in the offer's order); empty when the browser
    /// did not offer the MID extension, without which it could not tell them apart.
    public var slotMids: [String]

    /// Slots taken from one offer: a browser plays each as its own track, so more than a page
    /// can show would only cost the browser.
    public static let maximumSlots = 32

    public init(_ description: SessionDescription) throws(WebRTCOfferError) {
        self.description = description
        let usable = description.media.filter(Self.isUsable)
        guard let first = usable.first else { throw .noAudio }
        guard let ufrag = first.iceUsernameFragment, let password = first.icePassword else { throw .noICECredentials }
        guard let fingerprint = (first.fingerprints + Self.sessionFingerprints(description)).first(where: {
            $0.algorithm == "sha-256" && $0.bytes.count == 32
        }) else { throw .noFingerprint }
        guard first.setup != .passive, first.setup != .holdconn else { throw .wrongDTLSRole }
        guard let opus = first.rtpMaps.first(where: Self.isOpus) else { throw .noAudio }
        iceUsernameFragment = ufrag
        icePassword = password
        self.fingerprint = fingerprint
        opusPayloadType = opus.payloadType
        redPayloadType = first.rtpMaps.first { map in
            map.encoding.lowercased() == "red" && map.clockRate == 48_000
                && first.formatParameters(map.payloadType) == "\(opus.payloadType)/\(opus.payloadType)"
        }?.payloadType
        audioLevelExtensionID = first.headerExtensions.first { $0.uri == HeaderExtensionMap.audioLevelURI && $0.id <= 14 }?.id
        let sending = usable.first { $0.direction == .sendonly || $0.direction == .sendrecv || $0.direction == nil }
        midExtensionID = first.headerExtensions.first { $0.uri == HeaderExtensionMap.midURI && (1...14).contains($0.id) }?.id
        sendingMid = sending?.mid
        sendingSSRC = sending?.ssrcs.first
        receivingMids = usable.compactMap { section in
            section.direction == .recvonly || section.direction == .sendrecv || section.direction == nil ? section.mid : nil
        }
        slotMids = midExtensionID == nil ? [] : Array(receivingMids.filter { $0 != sending?.mid && RTPMidStamp.isUsable(mid: $0) }.prefix(Self.maximumSlots))
    }

    /// An audio section the relay can take part in: Opus over DTLS-SRTP with rtcp-mux, a mid.
    static func isUsable(_ section: MediaDescription) -> Bool {
        section.kind == "audio" && section.port != 0 && section.transport.uppercased().hasPrefix("UDP/TLS/RTP/SAVP")
            && section.hasRTCPMux && section.mid != nil && section.rtpMaps.contains(where: isOpus)
    }

    static func isOpus(_ map: RTPMap) -> Bool {
        map.encoding.lowercased() == "opus" && map.clockRate == 48_000 && map.payloadType >= 96
    }

    private static func sessionFingerprints(_ description: SessionDescription) -> [CertificateFingerprint] {
        description.attributes.compactMap { $0.name == "fingerprint" ? $0.value.flatMap(CertificateFingerprint.init(sdpValue:)) : nil }
    }
}

/// Why a browser's offer cannot be answered, in words for the page to show.
public enum WebRTCOfferError: Error, Sendable, Hashable, CustomStringConvertible {
    case unreadable(String)
    case noAudio
    case noICECredentials
    case noFingerprint
    case wrongDTLSRole
    case noSendingSSRC

    public var description: String {
        switch self {
        case let .unreadable(reason): return "the browser's offer could not be read: \(reason)"
        case .noAudio: return "the browser offered no audio with Opus over DTLS-SRTP and rtcp-mux, which the relay needs"
        case .noICECredentials: return "the browser's offer has no ICE username fragment and password"
        case .noFingerprint: return "the browser's offer has no SHA-256 certificate fingerprint"
        case .wrongDTLSRole: return "the browser's offer wants the relay to start DTLS; the relay only answers (a=setup:passive)"
        case .noSendingSSRC: return "the browser's offer does not say which SSRC its microphone sends with"
        }
    }
}
