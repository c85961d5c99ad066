import ParleyWire

/// The relay's SDP answer to a browser's offer (RFC 8829 §5.3, RFC 3264), as an ICE-lite
/// agent (RFC 8445 §2.5) that only answers: one BUNDLE transport on the relay's UDP port
/// (its one host candidate), DTLS as server (`a=setup:passive`), Opus with RED when the
/// browser offers it and the room allows it, the audio level extension, rtcp-mux.
///
/// The section the browser sends its microphone on is answered `recvonly`, or `sendrecv` when
/// the browser also receives on it: the room's voices beyond its slots arrive there, mixed in
/// one track. Each other receiving section is a slot (``WebRTCOffer/slotMids``), answered
/// `sendonly` with no SSRC named: the relay gives each slot one member's voice at a time and
/// writes the slot's MID into every copy (``RTPMidStamp``), which is how the browser routes a
/// stream no answer named (RFC 8843 §9.2). So members come and go without an offer again, and
/// each voice keeps its own SSRC end to end. Without the MID extension there are no slots, and
/// every voice arrives on the sending section.
public struct WebRTCAnswer: Sendable {
    /// The relay's side of the transport.
    public struct Transport: Sendable, Hashable {
        public var iceUsernameFragment: String
        public var icePassword: String
        public var fingerprint: CertificateFingerprint
        /// Where browsers reach the relay's UDP port: an IP address (never a name) and port.
        public var candidateAddress: String
        public var candidatePort: UInt16
        public var sessionID: UInt64

        public init(iceUsernameFragment: String, icePassword: String, fingerprint: CertificateFingerprint,
                    candidateAddress: String, candidatePort: UInt16, sessionID: UInt64) {
            self.iceUsernameFragment = iceUsernameFragment
            self.icePassword = icePassword
            self.fingerprint = fingerprint
            self.candidateAddress = candidateAddress
            self.candidatePort = candidatePort
            self.sessionID = sessionID
        }
    }

    /// Writes the answer; `version` counts the answers of this session.
    public static func answer(_ offer: WebRTCOffer, transport: Transport, version: UInt64, allowRED: Bool) -> SessionDescription {
        var answer = SessionDescription(origin: .init(sessionID: transport.sessionID, sessionVersion: version))
        let accepted = offer.description.media.filter(WebRTCOffer.isUsable).compactMap(\.mid)
        answer.attributes = [SDPAttribute("ice-lite"), SDPAttribute("group", (["BUNDLE"] + accepted).joined(separator: " ")),
                             SDPAttribute("msid-semantic", " WMS")]
        let red = allowRED ? offer.redPayloadType : nil
        for section in offer.description.media {
            guard WebRTCOffer.isUsable(section), let mid = section.mid else {
                answer.media.append(MediaDescription(kind: section.kind, port: 0, transport: section.transport,
                                                     formats: section.formats, attributes: section.mid.map { [SDPAttribute("mid", $0)] } ?? []))
                continue
            }
            var formats = ["\(offer.opusPayloadType)"]
            var attributes = [
                SDPAttribute("mid", mid),
                SDPAttribute("ice-ufrag", transport.iceUsernameFragment),
                SDPAttribute("ice-pwd", transport.icePassword),
                SDPAttribute("fingerprint", transport.fingerprint.sdpValue),
                SDPAttribute("setup", "passive"),
            ]
            if mid == accepted.first {
                attributes.append(SDPAttribute("candidate", "1 1 udp 2130706431 \(transport.candidateAddress) \(transport.candidatePort) typ host"))
                attributes.append(SDPAttribute("end-of-candidates"))
            }
            if let id = offer.audioLevelExtensionID {
                attributes.append(SDPAttribute("extmap", HeaderExtensionMap(id: id, uri: HeaderExtensionMap.audioLevelURI).sdpValue))
            }
            if let id = offer.midExtensionID {
                attributes.append(SDPAttribute("extmap", HeaderExtensionMap(id: id, uri: HeaderExtensionMap.midURI).sdpValue))
            }
            let isSlot = offer.slotMids.contains(mid)
            let direction: MediaDirection
            switch (mid == offer.sendingMid, offer.receivingMids.contains(mid)) {
            case (true, true): direction = .sendrecv
            case (true, false): direction = .recvonly
            case (false, _): direction = isSlot ? .sendonly : .inactive
            }
            attributes.append(SDPAttribute(direction.rawValue))
            attributes.append(SDPAttribute("rtcp-mux"))
            attributes.append(SDPAttribute("rtpmap", RTPMap(payloadType: offer.opusPayloadType, encoding: "opus", clockRate: 48_000, channels: 2).sdpValue))
            attributes.append(SDPAttribute("fmtp", "\(offer.opusPayloadType) minptime=10;useinbandfec=1"))
            if let red {
                formats.insert("\(red)", at: 0)
                attributes.append(SDPAttribute("rtpmap", RTPMap(payloadType: red, encoding: "red", clockRate: 48_000, channels: 2).sdpValue))
                attributes.append(SDPAttribute("fmtp", "\(red) \(offer.opusPayloadType)/\(offer.opusPayloadType)"))
            }
            if isSlot {
                // One stream per slot, named by its mid (checked to be a plain token).
                attributes.append(SDPAttribute("msid", "parley-\(mid) voice-\(mid)"))
            }
            answer.media.append(MediaDescription(kind: "audio", port: 9, transport: section.transport, formats: formats, attributes: attributes))
        }
        return answer
    }
}
