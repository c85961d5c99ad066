/// The part of a packet a ``WireError`` is about, so a log line can say where parsing failed.
public enum WireElement: String, Sendable, Hashable {
    case rtpHeader = "RTP header"
    case rtpCSRCList = "RTP CSRC list"
    case rtpHeaderExtension = "RTP header extension"
    case rtpPadding = "RTP padding"
    case audioLevel = "audio level extension"
    case rtcpHeader = "RTCP header"
    case rtcpSenderReport = "RTCP sender report"
    case rtcpReceiverReport = "RTCP receiver report"
    case rtcpReportBlock = "RTCP report block"
    case rtcpSourceDescription = "RTCP source description"
    case rtcpGoodbye = "RTCP goodbye"
    case rtcpFeedback = "RTCP feedback"
    case opusPacket = "Opus packet"
    case redPayload = "RED payload"
    case controlMessage = "Parley control message"
    case secureMessage = "Parley secure transport message"
    case trunkOpening = "Parley trunk opening"
    case inviteURL = "invite URL"
    case sframeHeader = "SFrame header"
    case mediaKeyPackage = "end-to-end media key package"
    case stunMessage = "STUN message"
    case sessionDescription = "SDP session description"
    case dtlsRecord = "DTLS record"
}

/// Why bytes could not be read or written. Every parser in ParleyWire throws only this type.
///
/// The cases carry string literals or numbers only, so creating an error on the relay's
/// packet path (hostile input) allocates nothing; ``description`` formats lazily.
public enum WireError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The bytes end before `element` does.
    case truncated(WireElement, needed: Int, available: Int)
    /// A field of `element` holds a value its format does not allow; `reason` is a literal.
    case malformed(WireElement, reason: String)
    /// The caller's output buffer cannot hold what is to be written.
    case outputTooSmall(needed: Int, available: Int)

    public var description: String {
        switch self {
        case let .truncated(element, needed, available):
            return "\(element.rawValue) is truncated: needs \(needed) bytes, \(available) available"
        case let .malformed(element, reason):
            return "\(element.rawValue) is malformed: \(reason)"
        case let .outputTooSmall(needed, available):
            return "output buffer too small: needs \(needed) bytes, has \(available)"
        }
    }

    /// The element the error is about, when there is one.
    public var element: WireElement? {
        switch self {
        case let .truncated(element, _, _), let .malformed(element, _): return element
        case .outputTooSmall: return nil
        }
    }
}
