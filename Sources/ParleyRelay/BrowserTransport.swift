import ParleyWebRTC
import ParleyWire

/// How a browser member's datagrams are carried, where a `parley` member's are sealed by its
/// Noise session: ICE-lite answers, the DTLS handshake, then SRTP and SRTCP with the keys it
/// exported. Loop-confined, owned by the member's ``Session``.
final class BrowserTransport {
    let member: BrowserMember
    let dtls: DTLSConnection
    /// Opens what the browser sends, once DTLS is up.
    var inbound: SRTPContext?
    /// The browser's payload types and extension id, against Parley's.
    let mapping: RTPPayloadMapping
    /// When the DTLS handshake's retransmission timer fires next (0: none runs).
    var dtlsDeadlineNanoseconds: UInt64 = 0

    init(member: BrowserMember, dtls: DTLSConnection) {
        self.member = member
        self.dtls = dtls
        mapping = RTPPayloadMapping(member.firstOffer, allowRED: member.allowRED)
    }
}

/// What protects the relay's packets for a browser: its outbound SRTP context and the
/// browser's payload numbering. A ``PacketProtector`` case, so forwarding writes a copy for a
/// browser exactly as it writes one for a `parley` member: into the send batch's slot, where
/// the payload type is renumbered if the browser numbers it differently, then protected in
/// place. Only RTP and RTCP go this way; the relay's control messages reach the page over its
/// WebSocket.
final class BrowserProtection: Sendable {
    let outbound: SRTPContext
    let mapping: RTPPayloadMapping

    init(outbound: SRTPContext, mapping: RTPPayloadMapping) {
        self.outbound = outbound
        self.mapping = mapping
    }

    /// The most bytes ``protect(_:into:)`` writes for `count` bytes.
    @inline(__always)
    func protectedSize(plaintextCount count: Int) -> Int { count + outbound.profile.rtcpOverhead }

    /// Copies `packet` into `output`, renumbers it for the browser and protects it; the size
    /// written, 0 for a packet the browser does not take (not RTP or RTCP, or RED it did not
    /// negotiate) or one libsrtp refused.
    func protect(_ packet: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Int {
        guard packet.count >= 2, packet.count + outbound.profile.rtcpOverhead <= output.count,
              let source = packet.baseAddress, let target = output.baseAddress else { return 0 }
        let kind = PacketKind(packet)
        guard kind == .rtp || kind == .rtcp else { return 0 }
        target.copyMemory(from: source, byteCount: packet.count)
        if kind == .rtp, !mapping.toBrowser(UnsafeMutableRawBufferPointer(rebasing: output[0..<packet.count])) { return 0 }
        return outbound.protect(output, count: packet.count, rtcp: kind == .rtcp) ?? 0
    }
}

/// The browser's numbers for Opus, RED and the audio level extension, against Parley's own
/// (``RTPHeader/opusPayloadType``, ``RTPHeader/redPayloadType``, ``AudioLevel/extensionID``).
/// Chromium uses Parley's numbers, so its packets pass untouched; another browser's are
/// renumbered in the packet's header (and in RED's block headers) both ways.
struct RTPPayloadMapping: Sendable, Hashable {
    let opus: UInt8
    /// Nil: the browser does not take RED (it did not offer it, or the room does not allow it).
    let red: UInt8?
    let audioLevelID: UInt8?

    init(_ offer: WebRTCOffer, allowRED: Bool) {
        opus = offer.opusPayloadType
        red = allowRED ? offer.redPayloadType : nil
        audioLevelID = offer.audioLevelExtensionID
    }

    init(opus: UInt8, red: UInt8?, audioLevelID: UInt8?) {
        self.opus = opus
        self.red = red
        self.audioLevelID = audioLevelID
    }

    var isParleys: Bool {
        opus == RTPHeader.opusPayloadType && (red ?? RTPHeader.redPayloadType) == RTPHeader.redPayloadType
            && (audioLevelID ?? AudioLevel.extensionID) == AudioLevel.extensionID
    }

    /// Renumbers a Parley RTP packet in place for the browser; false if it cannot take it.
    func toBrowser(_ packet: UnsafeMutableRawBufferPointer) -> Bool {
        let payloadType = packet[1] & 0x7F
        if payloadType == RTPHeader.redPayloadType, red == nil { return false }
        guard !isParleys else { return true }
        return renumber(packet, opus: (RTPHeader.opusPayloadType, opus), red: (RTPHeader.redPayloadType, red ?? RTPHeader.redPayloadType),
                        level: (AudioLevel.extensionID, audioLevelID ?? AudioLevel.extensionID))
    }

    /// Renumbers the browser's RTP packet in place as Parley's; false if it is neither Opus nor
    /// the RED it negotiated.
    func toParley(_ packet: UnsafeMutableRawBufferPointer) -> Bool {
        let payloadType = packet[1] & 0x7F
        guard payloadType == opus || (red != nil && payloadType == red) else { return false }
        guard !isParleys else { return true }
        return renumber(packet, opus: (opus, RTPHeader.opusPayloadType), red: (red ?? RTPHeader.redPayloadType, RTPHeader.redPayloadType),
                        level: (audioLevelID ?? AudioLevel.extensionID, AudioLevel.extensionID))
    }

    private func renumber(_ packet: UnsafeMutableRawBufferPointer, opus: (UInt8, UInt8), red: (UInt8, UInt8), level: (UInt8, UInt8)) -> Bool {
        guard let view = try? RTPPacketView(parsing: UnsafeRawBufferPointer(packet)) else { return false }
        let payloadType = packet[1] & 0x7F
        let mapped: UInt8
        switch payloadType {
        case opus.0: mapped = opus.1
        case red.0: mapped = red.1
        default: return false
        }
        packet[1] = packet[1] & 0x80 | mapped
        if level.0 != level.1, view.extensionProfile == RTPHeaderExtension.oneByteProfile, let data = view.extensionData,
           let dataStart = data.baseAddress.map({ $0 - UnsafeRawPointer(packet.baseAddress!) }) {
            // One-byte elements (RFC 8285 §4.2): ID in the high nibble, length - 1 in the low.
            var offset = dataStart
            let end = dataStart + data.count
            while offset < end {
                let byte = packet[offset]
                if byte == 0 { offset += 1; continue }
                let id = byte >> 4
                if id == 15 { break }
                if id == level.0 { packet[offset] = level.1 << 4 | byte & 0x0F }
                offset += 1 + Int(byte & 0x0F) + 1
            }
        }
        if payloadType == red.0 {
            // RED's block headers (RFC 2198 §3) name each block's payload type too.
            var offset = view.payloadRange.lowerBound
            while offset < view.payloadRange.upperBound {
                let header = packet[offset]
                let blockType = header & 0x7F
                if blockType == opus.0 { packet[offset] = header & 0x80 | opus.1 }
                guard header & 0x80 != 0 else { break }
                offset += 4
            }
        }
        return true
    }
}
