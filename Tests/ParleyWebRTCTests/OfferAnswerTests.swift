import ParleyWire
import Testing
@testable import ParleyWebRTC

@Suite("Offers and answers")
struct OfferAnswerTests {
    /// The page's first offer: its microphone, sent only (Chromium 156's form).
    static let firstOffer = """
        v=0\r
        o=- 4611731400430051336 2 IN IP4 127.0.0.1\r
        s=-\r
        t=0 0\r
        a=group:BUNDLE 0\r
        m=audio 9 UDP/TLS/RTP/SAVPF 111 63 0\r
        c=IN IP4 0.0.0.0\r
        a=ice-ufrag:brws\r
        a=ice-pwd:browserpasswordbrowserpassword\r
        a=fingerprint:sha-256 DA:A6:59:CD:47:0B:29:5A:D1:0C:A0:67:E3:B4:B5:26:7F:50:C5:4B:BC:11:81:D9:C0:2C:C3:FF:E7:7C:EC:A7\r
        a=setup:actpass\r
        a=mid:0\r
        a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level\r
        a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r
        a=sendonly\r
        a=rtcp-mux\r
        a=rtpmap:111 opus/48000/2\r
        a=fmtp:111 minptime=10;useinbandfec=1\r
        a=rtpmap:63 red/48000/2\r
        a=fmtp:63 111/111\r
        a=rtpmap:0 PCMU/8000\r
        a=ssrc:1111 cname:x\r

        """

    /// Its offer again with two sections to hear members on, and a video section it cannot have.
    static var secondOffer: String {
        let receiving = { (mid: String) in """
            m=audio 9 UDP/TLS/RTP/SAVPF 111 63\r
            c=IN IP4 0.0.0.0\r
            a=ice-ufrag:brws\r
            a=ice-pwd:browserpasswordbrowserpassword\r
            a=fingerprint:sha-256 DA:A6:59:CD:47:0B:29:5A:D1:0C:A0:67:E3:B4:B5:26:7F:50:C5:4B:BC:11:81:D9:C0:2C:C3:FF:E7:7C:EC:A7\r
            a=setup:actpass\r
            a=mid:\(mid)\r
            a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level\r
            a=recvonly\r
            a=rtcp-mux\r
            a=rtpmap:111 opus/48000/2\r
            a=rtpmap:63 red/48000/2\r
            a=fmtp:63 111/111\r

            """ }
        return firstOffer.replacingOccurrences(of: "BUNDLE 0", with: "BUNDLE 0 1 2") + receiving("1") + receiving("2")
            + "m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:3\r\na=rtcp-mux\r\na=rtpmap:96 VP8/90000\r\n"
    }

    static let transport = WebRTCAnswer.Transport(
        iceUsernameFragment: "relay", icePassword: "relaypasswordrelaypassword",
        fingerprint: CertificateFingerprint(algorithm: "sha-256", bytes: Array(repeating: 0xAB, count: 32)),
        candidateAddress: "127.0.0.1", candidatePort: 4433, sessionID: 77)

    @Test func theFirstOfferIsAnsweredAsAnICELiteReceiverOfTheMicrophone() throws {
        let offer = try WebRTCOffer(SessionDescription(parsing: Self.firstOffer))
        #expect(offer.iceUsernameFragment == "brws")
        #expect(offer.sendingSSRC == 1111)
        #expect(offer.sendingMid == "0")
        #expect(offer.opusPayloadType == 111)
        #expect(offer.redPayloadType == 63)
        #expect(offer.audioLevelExtensionID == 1)
        #expect(offer.midExtensionID == 4)
        #expect(offer.slotMids.isEmpty)
        let answer = WebRTCAnswer.answer(offer, transport: Self.transport, version: 1, allowRED: true)
        let text = answer.text
        #expect(text.contains("a=ice-lite\r\n"))
        #expect(text.contains("a=group:BUNDLE 0\r\n"))
        #expect(text.contains("a=setup:passive\r\n"))
        #expect(text.contains("a=candidate:1 1 udp 2130706431 127.0.0.1 4433 typ host\r\n"))
        #expect(text.contains("a=recvonly\r\n"))
        #expect(text.contains("m=audio 9 UDP/TLS/RTP/SAVPF 63 111\r\n"))
        #expect(text.contains("a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r\n"))
        #expect(!text.contains("a=msid:"), "the sending section is no slot")
        #expect(!text.contains("PCMU"))
        let reread = try SessionDescription(parsing: text)
        #expect(reread.media[0].fingerprints == [Self.transport.fingerprint])
        #expect(reread.media[0].iceUsernameFragment == "relay")
    }

    @Test func sectionsToHearMembersOnAreAnsweredAsSlotsWithNoSSRC() throws {
        let offer = try WebRTCOffer(SessionDescription(parsing: Self.secondOffer))
        #expect(offer.receivingMids == ["1", "2"])
        #expect(offer.slotMids == ["1", "2"])
        let answer = WebRTCAnswer.answer(offer, transport: Self.transport, version: 2, allowRED: false)
        #expect(answer.bundle == ["0", "1", "2"])
        #expect(answer.media.count == 4)
        #expect(answer.media[0].direction == .recvonly, "the microphone's section only sends: it takes no voices")
        #expect(answer.media[1].direction == .sendonly)
        #expect(answer.media[1].ssrcs.isEmpty, "a slot names no SSRC: the MID in each packet routes it")
        #expect(answer.media[1].attribute("msid") == "parley-1 voice-1")
        #expect(answer.media[1].formats == ["111"], "RED only where the room allows it")
        #expect(answer.media[2].direction == .sendonly)
        #expect(answer.media.allSatisfy { $0.port == 0 || $0.attributes("extmap").contains("4 urn:ietf:params:rtp-hdrext:sdes:mid") })
        #expect(answer.media[3].port == 0, "video is refused")
        #expect(answer.media[3].mid == "3")
        #expect(answer.media[1].attribute("candidate") == nil, "the one candidate is on the first bundled section")
    }

    @Test func withoutTheMidExtensionThereAreNoSlots() throws {
        let offer = try WebRTCOffer(SessionDescription(parsing: Self.secondOffer.replacingOccurrences(of: "a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r\n", with: "")))
        #expect(offer.midExtensionID == nil)
        #expect(offer.slotMids.isEmpty, "the browser could not tell slots apart without the MID")
        let answer = WebRTCAnswer.answer(offer, transport: Self.transport, version: 1, allowRED: true)
        #expect(answer.media[1].direction == .inactive)
        #expect(!answer.text.contains("sdes:mid"))
    }

    @Test func slotsAreBoundedAndTheirMidsArePlainTokens() throws {
        var text = Self.secondOffer.replacingOccurrences(of: "a=mid:2\r\n", with: "a=mid:a\"b\r\n")
        for index in 0..<40 {
            text += "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:x\(index)\r\na=recvonly\r\na=rtcp-mux\r\na=rtpmap:111 opus/48000/2\r\n"
        }
        let offer = try WebRTCOffer(SessionDescription(parsing: text))
        #expect(offer.slotMids.count == WebRTCOffer.maximumSlots)
        #expect(offer.slotMids.first == "1")
        #expect(!offer.slotMids.contains("a\"b"), "a MID that is not a plain token is no slot")
        let answer = WebRTCAnswer.answer(offer, transport: Self.transport, version: 1, allowRED: true)
        #expect(answer.media.filter { $0.direction == .sendonly }.count == WebRTCOffer.maximumSlots)
    }

    @Test func offersTheRelayCannotAnswerSayWhy() throws {
        func refusal(_ text: String) -> WebRTCOfferError? {
            guard let description = try? SessionDescription(parsing: text) else { return .unreadable("") }
            do throws(WebRTCOfferError) {
                _ = try WebRTCOffer(description)
                return nil
            } catch {
                return error
            }
        }
        #expect(refusal(Self.firstOffer.replacingOccurrences(of: "a=rtcp-mux\r\n", with: "")) == .noAudio)
        #expect(refusal(Self.firstOffer.replacingOccurrences(of: "opus", with: "speex")) == .noAudio)
        #expect(refusal(Self.firstOffer.replacingOccurrences(of: "a=ice-pwd:browserpasswordbrowserpassword\r\n", with: "")) == .noICECredentials)
        #expect(refusal(Self.firstOffer.replacingOccurrences(of: "sha-256", with: "sha-1")) == .noFingerprint)
        #expect(refusal(Self.firstOffer.replacingOccurrences(of: "actpass", with: "passive")) == .wrongDTLSRole)
        #expect(WebRTCOfferError.noAudio.description.contains("Opus"))
    }
}
