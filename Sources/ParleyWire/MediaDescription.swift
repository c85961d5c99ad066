/// One media section of an SDP description (RFC 8866 §5.14): its `m=` line and the
/// attributes under it, with typed readers for what an audio-only WebRTC call uses:
/// `mid`, ICE credentials (RFC 8839), the DTLS fingerprint and role (RFC 8122, RFC 5763),
/// codecs (`rtpmap`, `fmtp`), header extensions (`extmap`, RFC 8285), SSRCs (RFC 5576),
/// the direction and `rtcp-mux`.
///
/// ```
/// m=<media> <port> <proto> <fmt> ...
/// ```
public struct MediaDescription: Sendable, Hashable {
    /// `audio`, `video`, `application`.
    public var kind: String
    public var port: UInt16
    /// `UDP/TLS/RTP/SAVPF` for WebRTC media.
    public var transport: String
    /// Payload types (RTP) or other format names, as written.
    public var formats: [String]
    /// The section's `c=` line, when it has one.
    public var connection: String?
    public var attributes: [SDPAttribute]

    public init(kind: String, port: UInt16 = 9, transport: String = "UDP/TLS/RTP/SAVPF", formats: [String],
                connection: String? = "IN IP4 0.0.0.0", attributes: [SDPAttribute] = []) {
        self.kind = kind
        self.port = port
        self.transport = transport
        self.formats = formats
        self.connection = connection
        self.attributes = attributes
    }

    init(parsingMediaLine value: String) throws(WireError) {
        let fields = value.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count >= 3, let port = UInt16(fields[1].prefix { $0 != "/" }) else {
            throw .malformed(.sessionDescription, reason: "m= line is not <media> <port> <proto> <formats>")
        }
        self.init(kind: String(fields[0]), port: port, transport: String(fields[2]), formats: fields.dropFirst(3).map(String.init),
                  connection: nil, attributes: [])
    }

    /// The value of the first attribute named `name` (`""` for a flag like `rtcp-mux`).
    public func attribute(_ name: String) -> String? {
        attributes.first { $0.name == name }.map { $0.value ?? "" }
    }

    /// The values of every attribute named `name`.
    public func attributes(_ name: String) -> [String] {
        attributes.compactMap { $0.name == name ? $0.value : nil }
    }

    public var mid: String? { attribute("mid") }
    public var hasRTCPMux: Bool { attribute("rtcp-mux") != nil }

    /// `a=ice-ufrag`, if it is one RFC 8839 §5.4 allows: 4 to 256 ice-chars.
    public var iceUsernameFragment: String? {
        attribute("ice-ufrag").flatMap { ICECredentials.isValid($0, lengths: 4...256) ? $0 : nil }
    }

    /// `a=ice-pwd`, if it is one RFC 8839 §5.4 allows: 22 to 256 ice-chars.
    public var icePassword: String? {
        attribute("ice-pwd").flatMap { ICECredentials.isValid($0, lengths: 22...256) ? $0 : nil }
    }

    /// Every readable `a=fingerprint` (RFC 8122 §5).
    public var fingerprints: [CertificateFingerprint] {
        attributes("fingerprint").compactMap(CertificateFingerprint.init(sdpValue:))
    }

    /// `a=setup` (RFC 4145 §4): who starts the DTLS handshake.
    public var setup: DTLSSetup? { attribute("setup").flatMap(DTLSSetup.init(rawValue:)) }

    public var direction: MediaDirection? {
        attributes.lazy.compactMap { $0.value == nil ? MediaDirection(rawValue: $0.name) : nil }.first
    }

    /// `a=rtpmap:<payload type> <encoding>/<clock rate>[/<channels>]`, each readable one.
    public var rtpMaps: [RTPMap] { attributes("rtpmap").compactMap(RTPMap.init(sdpValue:)) }

    /// `a=fmtp:<payload type> <parameters>` for `payloadType`.
    public func formatParameters(_ payloadType: UInt8) -> String? {
        for value in attributes("fmtp") {
            let parts = value.split(separator: " ", maxSplits: 1)
            if parts.count == 2, UInt8(parts[0]) == payloadType { return String(parts[1]) }
        }
        return nil
    }

    /// `a=extmap:<id>[/<direction>] <uri>`, each readable one (ids 1–255, RFC 8285 §5).
    public var headerExtensions: [HeaderExtensionMap] { attributes("extmap").compactMap(HeaderExtensionMap.init(sdpValue:)) }

    /// The SSRCs its `a=ssrc` lines name (RFC 5576 §4.1), in order, each once.
    public var ssrcs: [UInt32] {
        var seen: [UInt32] = []
        for value in attributes("ssrc") {
            guard let ssrc = UInt32(value.prefix { $0 != " " }), !seen.contains(ssrc) else { continue }
            seen.append(ssrc)
        }
        return seen
    }
}

/// `a=sendrecv`, `a=sendonly`, `a=recvonly`, `a=inactive` (RFC 8866 §6.7), from the
/// writer's point of view.
public enum MediaDirection: String, Sendable, Hashable {
    case sendrecv, sendonly, recvonly, inactive

    /// The direction that answers this one (RFC 3264 §6.1).
    public var answer: MediaDirection {
        switch self {
        case .sendrecv: return .sendrecv
        case .sendonly: return .recvonly
        case .recvonly: return .sendonly
        case .inactive: return .inactive
        }
    }
}

/// `a=setup` (RFC 4145 §4, RFC 5763 §5).
public enum DTLSSetup: String, Sendable, Hashable {
    case active, passive, actpass, holdconn
}

/// `a=rtpmap:111 opus/48000/2`.
public struct RTPMap: Sendable, Hashable {
    public var payloadType: UInt8
    public var encoding: String
    public var clockRate: UInt32
    public var channels: UInt8?

    public init(payloadType: UInt8, encoding: String, clockRate: UInt32, channels: UInt8? = nil) {
        self.payloadType = payloadType
        self.encoding = encoding
        self.clockRate = clockRate
        self.channels = channels
    }

    init?(sdpValue: String) {
        let parts = sdpValue.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, let payloadType = UInt8(parts[0]), payloadType < 128 else { return nil }
        let codec = parts[1].split(separator: "/")
        guard codec.count == 2 || codec.count == 3, !codec[0].isEmpty, let clockRate = UInt32(codec[1]) else { return nil }
        var channels: UInt8?
        if codec.count == 3 {
            guard let count = UInt8(codec[2]) else { return nil }
            channels = count
        }
        self.init(payloadType: payloadType, encoding: String(codec[0]), clockRate: clockRate, channels: channels)
    }

    public var sdpValue: String {
        "\(payloadType) \(encoding)/\(clockRate)" + (channels.map { "/\($0)" } ?? "")
    }
}

/// `a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level`.
public struct HeaderExtensionMap: Sendable, Hashable {
    public var id: UInt8
    public var uri: String

    public static let audioLevelURI = "urn:ietf:params:rtp-hdrext:ssrc-audio-level"
    public static let midURI = "urn:ietf:params:rtp-hdrext:sdes:mid"

    public init(id: UInt8, uri: String) {
        self.id = id
        self.uri = uri
    }

    init?(sdpValue: String) {
        let parts = sdpValue.split(separator: " ")
        guard parts.count >= 2, let id = UInt8(parts[0].prefix { $0 != "/" }), id >= 1, !parts[1].isEmpty else { return nil }
        self.init(id: id, uri: String(parts[1]))
    }

    public var sdpValue: String { "\(id) \(uri)" }
}

/// A certificate's fingerprint as `a=fingerprint:sha-256 AB:CD:…` gives it (RFC 8122 §5).
public struct CertificateFingerprint: Sendable, Hashable {
    /// Lowercase, as `sha-256`.
    public var algorithm: String
    public var bytes: [UInt8]

    public init(algorithm: String, bytes: [UInt8]) {
        self.algorithm = algorithm.lowercased()
        self.bytes = bytes
    }

    public init?(sdpValue: String) {
        let parts = sdpValue.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].count <= 16 else { return nil }
        let pairs = parts[1].split(separator: ":", omittingEmptySubsequences: false)
        guard (1...64).contains(pairs.count) else { return nil }
        var bytes: [UInt8] = []
        for pair in pairs {
            guard pair.count == 2, let byte = UInt8(pair, radix: 16) else { return nil }
            bytes.append(byte)
        }
        self.init(algorithm: String(parts[0]), bytes: bytes)
    }

    public var sdpValue: String {
        algorithm + " " + bytes.map { byte in
            let digits = String(byte, radix: 16, uppercase: true)
            return digits.count == 1 ? "0" + digits : digits
        }.joined(separator: ":")
    }
}

/// ICE's short-term credentials (RFC 8839 §5.4).
public enum ICECredentials {
    /// ice-char = ALPHA / DIGIT / "+" / "/"
    public static func isValid(_ text: String, lengths: ClosedRange<Int>) -> Bool {
        lengths.contains(text.utf8.count) && text.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "/")
        }
    }
}
