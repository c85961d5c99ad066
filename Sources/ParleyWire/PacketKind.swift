/// What a datagram arriving on Parley's single UDP port is, decided from its first two bytes.
///
/// One port carries media, RTCP and control (one firewall hole), so the receiver
/// demultiplexes as RFC 7983 §7 does, by the first byte:
///
/// ```
///              +----------------+
///              |        [0..3] -+--> STUN        (browsers' ICE checks)
///              |      [16..19] -+--> ZRTP        (not used by Parley)
///              |      [20..63] -+--> DTLS        (browsers' DTLS-SRTP handshake)
///              |      [64..79] -+--> TURN        (not used by Parley)
///              |      [80..95] -+--> Parley (this range cannot be RTP):
///              |                |      0x50 control, 0x51–0x54 handshake, 0x55 sealed,
///              |                |      0x56–0x57 trunk handshake
///              |    [128..191] -+--> RTP or RTCP
///              +----------------+
/// ```
///
/// A browser member's media arrives as SRTP and SRTCP in the RTP range; the relay tells it
/// from a Parley member's by its source address, not its first byte.
///
/// RTP and RTCP share the range and are told apart by the second byte (rtcp-mux,
/// RFC 5761 §4): with the marker bit included, RTCP packet types 192–223 cannot
/// collide with RTP payload types, because RFC 5761 forbids RTP payload types 64–95.
public enum PacketKind: Sendable, Hashable, CaseIterable {
    case rtp
    case rtcp
    /// A plaintext control message (``ControlMessage``), used only in insecure mode.
    case control
    /// A step of the secure transport's handshake (``SecureMessageType`` hello to response, and
    /// the trunk init and response between relays).
    case handshake
    /// A sealed packet (``SealedHeader``) whose ciphertext holds an RTP, RTCP or control packet.
    case sealed
    /// A STUN message (``STUNMessageView``): a browser's ICE connectivity or consent check.
    case stun
    /// A DTLS record (``DTLSRecordHeader``): a browser's DTLS-SRTP handshake.
    case dtls
    /// Anything else, including empty datagrams; receivers drop these.
    case unknown

    /// First bytes reserved for Parley's own messages (control and, later, handshakes).
    public static let parleyFirstByteRange: ClosedRange<UInt8> = 80...95

    public init(firstByte: UInt8, secondByte: UInt8?) {
        switch firstByte {
        case 128...191:
            guard let secondByte else { self = .unknown; return }
            self = (192...223).contains(secondByte) ? .rtcp : .rtp
        case ControlMessage.magic:
            self = .control
        case SecureMessageType.hello.rawValue...SecureMessageType.handshakeResponse.rawValue:
            self = .handshake
        case SecureMessageType.sealed.rawValue:
            self = .sealed
        case SecureMessageType.trunkInit.rawValue, SecureMessageType.trunkResponse.rawValue:
            self = .handshake
        case 0...3:
            self = .stun
        case 20...63:
            self = .dtls
        default:
            self = .unknown
        }
    }

    /// Classifies a datagram without reading past its second byte.
    public init(_ bytes: UnsafeRawBufferPointer) {
        guard let first = bytes.first else { self = .unknown; return }
        self.init(firstByte: first, secondByte: bytes.count > 1 ? bytes[1] : nil)
    }
}

extension PacketKind {
    /// A short lowercase name, for metrics labels and logs.
    public var label: String {
        switch self {
        case .rtp: return "rtp"
        case .rtcp: return "rtcp"
        case .control: return "control"
        case .handshake: return "handshake"
        case .sealed: return "sealed"
        case .stun: return "stun"
        case .dtls: return "dtls"
        case .unknown: return "unknown"
        }
    }
}
