import ParleyDatagrams
import ParleyWebRTC
import ParleyWire

/// A person in a browser: a member like any other (its identity, its one stream, its state,
/// texts and moderation are ``MemberLeg``'s, its forwarding, RTCP and rosters ``LegHandler``'s),
/// whose hop is DTLS-SRTP instead of Noise (``BrowserTransport``) and whose control messages
/// travel over its page's HTTP signalling (``BrowserMember``) instead of the UDP port.
///
/// Made by ``BrowserTable`` when a DTLS ClientHello arrives from an address an authentic ICE
/// check for an answered offer came from; admitted to its room then, as joining; active once
/// its DTLS handshake is done and its SRTP keys are in its transport (what `ready` is for a
/// `parley` member). One loop's thread, as every leg.
final class BrowserLeg: MemberLeg, @unchecked Sendable {
    /// The page's side: its offer, its ICE credentials, what it is told.
    let page: BrowserMember
    let dtls: DTLSConnection
    let browserTransport: BrowserTransport
    /// When the DTLS handshake's retransmission timer fires next (0: none runs).
    var dtlsDeadlineNanoseconds: UInt64 = 0

    /// `isEndToEndEncrypted`: its room is (decided when the leg is made, as for a `parley`
    /// member's join); the leg then carries the page's identity key into the roster.
    init(page: BrowserMember, dtls: DTLSConnection, id: UInt64, address: DatagramAddress, peer: PeerAddress, workerIndex: Int,
         limits: RelayLimits, isEndToEndEncrypted: Bool = false, nowNanoseconds: UInt64) {
        self.page = page
        self.dtls = dtls
        browserTransport = BrowserTransport(page: page)
        super.init(
            id: id, address: address, peer: peer, room: page.room, identity: page.identity, ssrc: page.ssrc, canPublish: page.canPublish,
            isModerator: page.isModerator, capabilities: page.capabilities,
            identityKey: isEndToEndEncrypted ? page.identityKey : [], isEndToEndEncrypted: isEndToEndEncrypted,
            cookie: UInt64.random(in: 1 ... .max), token: page.token, workerIndex: workerIndex, limits: limits, nowNanoseconds: nowNanoseconds)
        secure(with: browserTransport)
    }

    override var logDescription: String { "\(identity)@\(room) from \(peer) ssrc \(ssrc) (browser)" }

    /// The goodbye reached the page over its reliable signalling, and a page leaves over HTTP:
    /// there is nothing to retransmit or acknowledge at its address, and no reason to keep its
    /// transport (with its SRTP) after it left.
    override var isRememberedAfterLeaving: Bool { false }
}

/// How a browser member's datagrams are opened and sealed: SRTP and SRTCP with the keys its
/// DTLS handshake exported (RFC 5764), and its control messages handed to its page's
/// signalling, which is reliable, rather than sent over UDP.
///
/// The keys are set once on the leg's loop when the handshake is done, before the leg is
/// active and so before any other loop forwards to it (a snapshot lists active legs only; the
/// rooms' lock orders the write before those loops' reads). Outbound, libsrtp's state is
/// behind ``SRTPContext``'s own lock, since several loops protect copies for one browser.
final class BrowserTransport: LegTransport, @unchecked Sendable {
    let page: BrowserMember
    /// What makes a forwarded RTP packet the browser's, before it is protected.
    let copies: BrowserCopyMaker
    /// The browser's payload types and extension ids against Parley's.
    var mapping: RTPPayloadMapping { copies.mapping }
    private(set) var inbound: SRTPContext?
    private(set) var outbound: SRTPContext?

    init(page: BrowserMember) {
        self.page = page
        copies = BrowserCopyMaker(mapping: RTPPayloadMapping(page.offer, allowRED: page.allowRED), receivers: page.receivers)
    }

    /// The handshake's keys; on the leg's loop, before the leg is active.
    func setKeys(inbound: SRTPContext, outbound: SRTPContext) {
        self.inbound = inbound
        self.outbound = outbound
    }

    var hasKeys: Bool { inbound != nil }

    /// SRTP and SRTCP share RTP's range (RFC 7983); STUN and DTLS from the browser's address
    /// are the ``BrowserTable``'s, told by their first byte before a leg is looked up.
    func carries(_ kind: PacketKind) -> Bool {
        switch kind {
        case .rtp, .rtcp: return inbound != nil
        case .control, .handshake, .sealed, .stun, .dtls, .unknown: return false
        }
    }

    /// Authenticates and decrypts in place in the read batch, then renumbers the browser's
    /// payload types as Parley's.
    ///
    /// The browser's RTP must carry the SSRC its offer named, checked in the clear header before
    /// libsrtp sees it; its reports may come from a few others (a browser's receive side may
    /// report from its own SSRC), bounded by the inbound context's streams.
    func open(_ datagram: inout InboundDatagram) -> DropReason? {
        guard let inbound else { return .notJoined }
        let isRTCP = datagram.kind == .rtcp
        guard datagram.bytes.count >= (isRTCP ? 8 : 12) else { return .malformed }
        if !isRTCP, SRTPContext.ssrc(of: UnsafeRawBufferPointer(datagram.bytes), rtcp: false) != page.ssrc { return .foreignSSRC }
        switch inbound.unprotect(datagram.bytes, count: datagram.bytes.count, rtcp: isRTCP) {
        case let .success(count):
            if !isRTCP, !mapping.toParley(UnsafeMutableRawBufferPointer(rebasing: datagram.bytes[0..<count])) { return .malformed }
            datagram.opened(at: 0, count: count)
            return nil
        case .failure(.replayed): return .replayed
        case .failure(.authenticationFailed): return .decryptFailed
        case .failure(.malformed): return .malformed
        case .failure(.unexpectedSSRC): return .foreignSSRC
        }
    }

    func sealedSize(plaintextCount: Int) -> Int {
        plaintextCount + (outbound?.profile.rtcpOverhead ?? 0) + copies.maximumGrowth
    }

    /// RTP and RTCP: copied into the send batch's slot, its RTP made the browser's
    /// (``BrowserCopyMaker``), protected in place. A control message goes to the page instead
    /// (0 bytes for the socket). A packet the outbound context refuses (a sequence number it
    /// already protected for that SSRC, or an SSRC beyond its streams) is dropped: 0 bytes, and
    /// the leg goes on.
    func seal(_ packet: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, nowNanoseconds: UInt64) -> Int {
        let kind = PacketKind(packet)
        if kind == .control {
            page.deliver(controlBytes: packet)
            return 0
        }
        guard kind == .rtp || kind == .rtcp, let outbound, packet.count + outbound.profile.rtcpOverhead <= output.count,
              let source = packet.baseAddress, let target = output.baseAddress else { return 0 }
        target.copyMemory(from: source, byteCount: packet.count)
        var count = packet.count
        if kind == .rtp {
            // The copy may grow into the slot, short of the room the protection adds.
            let room = UnsafeMutableRawBufferPointer(rebasing: output[0..<(output.count - outbound.profile.rtcpOverhead)])
            guard let made = copies.make(in: room, count: count, nowNanoseconds: nowNanoseconds) else { return 0 }
            count = made
        }
        return outbound.protect(output, count: count, rtcp: kind == .rtcp) ?? 0
    }

    var isSecure: Bool { true }
}

/// The browser's numbers for Opus, RED and the audio-level extension, against Parley's own
/// (``RTPHeader/opusPayloadType``, ``RTPHeader/redPayloadType``, ``AudioLevel/extensionID``).
/// Chromium uses Parley's numbers for Opus and the audio level, so its packets pass untouched;
/// another browser's are renumbered in the packet's header (and in RED's block headers) both
/// ways, in place.
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

    /// Renumbers a Parley RTP packet (parsed from the first bytes of `buffer`) in place for the
    /// browser; the view of the renumbered packet, or nil if the browser cannot take it.
    func toBrowser(_ packet: RTPPacketView, in buffer: UnsafeMutableRawBufferPointer) -> RTPPacketView? {
        if packet.payloadType == RTPHeader.redPayloadType, red == nil { return nil }
        guard !isParleys else { return packet }
        return renumber(packet, in: buffer, opus: (RTPHeader.opusPayloadType, opus), red: (RTPHeader.redPayloadType, red ?? RTPHeader.redPayloadType),
                        level: (AudioLevel.extensionID, audioLevelID ?? AudioLevel.extensionID))
    }

    /// Renumbers the browser's RTP packet in place as Parley's; false if it is neither Opus nor
    /// the RED it negotiated. (Parsed here, and only when the numbers differ: the relay parses
    /// the opened packet again when it forwards it.)
    func toParley(_ packet: UnsafeMutableRawBufferPointer) -> Bool {
        guard packet.count >= 2 else { return false }
        let payloadType = packet[1] & 0x7F
        guard payloadType == opus || (red != nil && payloadType == red) else { return false }
        guard !isParleys else { return true }
        guard let view = try? RTPPacketView(parsing: UnsafeRawBufferPointer(packet)) else { return false }
        return renumber(view, in: packet, opus: (opus, RTPHeader.opusPayloadType), red: (red ?? RTPHeader.redPayloadType, RTPHeader.redPayloadType),
                        level: (audioLevelID ?? AudioLevel.extensionID, AudioLevel.extensionID)) != nil
    }

    /// Each pair is (from, to). Nil, the packet untouched, when its payload type is neither
    /// `opus.0` nor `red.0`.
    private func renumber(_ packet: RTPPacketView, in buffer: UnsafeMutableRawBufferPointer,
                          opus: (UInt8, UInt8), red: (UInt8, UInt8), level: (UInt8, UInt8)) -> RTPPacketView? {
        let mapped: UInt8
        switch packet.payloadType {
        case opus.0: mapped = opus.1
        case red.0: mapped = red.1
        default: return nil
        }
        let renumbered = packet.rewritingPayloadType(mapped, in: buffer)
        if level.0 != level.1, packet.extensionProfile == RTPHeaderExtension.oneByteProfile, let data = packet.extensionData,
           let dataBase = data.baseAddress, let base = buffer.baseAddress {
            // One-byte elements (RFC 8285 §4.2): ID in the high nibble, length - 1 in the low.
            var offset = dataBase - UnsafeRawPointer(base)
            let end = offset + data.count
            while offset < end {
                let byte = buffer[offset]
                if byte == 0 { offset += 1; continue }
                let id = byte >> 4
                if id == 15 { break }
                if id == level.0 { buffer[offset] = level.1 << 4 | byte & 0x0F }
                offset += 1 + Int(byte & 0x0F) + 1
            }
        }
        if packet.payloadType == red.0 {
            // RED's block headers (RFC 2198 §3) name each block's payload type too.
            var offset = packet.payloadRange.lowerBound
            while offset < packet.payloadRange.upperBound {
                let header = buffer[offset]
                if header & 0x7F == opus.0 { buffer[offset] = header & 0x80 | opus.1 }
                guard header & 0x80 != 0 else { break }
                offset += 4
            }
        }
        return renumbered
    }
}
