import Testing
@testable import ParleyWire

/// SDP as Chromium offers it for an audio call (its offer, taken from Chromium 156 here, with
/// the lines an audio-only relay reads) and as the relay answers.
@Suite("SDP session descriptions")
struct SessionDescriptionTests {
    static let chromiumOffer = """
        v=0\r
        o=- 5507794408102901042 2 IN IP4 127.0.0.1\r
        s=-\r
        t=0 0\r
        a=group:BUNDLE 0\r
        a=extmap-allow-mixed\r
        a=msid-semantic: WMS\r
        m=audio 9 UDP/TLS/RTP/SAVPF 111 63 9 0 8 13 110 126\r
        c=IN IP4 0.0.0.0\r
        a=rtcp:9 IN IP4 0.0.0.0\r
        a=ice-ufrag:hnrc\r
        a=ice-pwd:QGD72yuYjU/dwmrdllCuVGDI\r
        a=ice-options:trickle\r
        a=fingerprint:sha-256 DA:A6:59:CD:47:0B:29:5A:D1:0C:A0:67:E3:B4:B5:26:7F:50:C5:4B:BC:11:81:D9:C0:2C:C3:FF:E7:7C:EC:A7\r
        a=setup:actpass\r
        a=mid:0\r
        a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level\r
        a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r
        a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r
        a=sendrecv\r
        a=msid:- 779e61c6-b6bd-4d58-9859-694f57c6946b\r
        a=rtcp-mux\r
        a=rtcp-rsize\r
        a=rtpmap:111 opus/48000/2\r
        a=rtcp-fb:111 transport-cc\r
        a=fmtp:111 minptime=10;useinbandfec=1\r
        a=rtpmap:63 red/48000/2\r
        a=fmtp:63 111/111\r
        a=rtpmap:0 PCMU/8000\r
        a=ssrc:3202171117 cname:F/tLiPmDpW0LxTBo\r
        a=ssrc:3202171117 msid:- 779e61c6-b6bd-4d58-9859-694f57c6946b\r

        """

    @Test func chromiumsOfferReadsAsOneAudioSectionWithWhatTheRelayNeeds() throws {
        let offer = try SessionDescription(parsing: Self.chromiumOffer)
        #expect(offer.origin.sessionID == 5_507_794_408_102_901_042)
        #expect(offer.bundle == ["0"])
        #expect(offer.media.count == 1)
        let audio = offer.media[0]
        #expect(audio.kind == "audio")
        #expect(audio.transport == "UDP/TLS/RTP/SAVPF")
        #expect(audio.formats.first == "111")
        #expect(audio.mid == "0")
        #expect(audio.iceUsernameFragment == "hnrc")
        #expect(audio.icePassword == "QGD72yuYjU/dwmrdllCuVGDI")
        #expect(audio.setup == .actpass)
        #expect(audio.direction == .sendrecv)
        #expect(audio.hasRTCPMux)
        #expect(audio.fingerprints.first?.algorithm == "sha-256")
        #expect(audio.fingerprints.first?.bytes.count == 32)
        #expect(audio.fingerprints.first?.bytes.first == 0xDA)
        #expect(audio.rtpMaps.first == RTPMap(payloadType: 111, encoding: "opus", clockRate: 48_000, channels: 2))
        #expect(audio.rtpMaps.contains { $0.encoding == "red" && $0.payloadType == 63 })
        #expect(audio.formatParameters(111) == "minptime=10;useinbandfec=1")
        #expect(audio.formatParameters(63) == "111/111")
        #expect(audio.headerExtensions.first == HeaderExtensionMap(id: 1, uri: HeaderExtensionMap.audioLevelURI))
        #expect(audio.ssrcs == [3_202_171_117])
    }

    @Test func aWrittenDescriptionReadsBackTheSame() throws {
        let offer = try SessionDescription(parsing: Self.chromiumOffer)
        #expect(try SessionDescription(parsing: offer.text) == offer)
        #expect(offer.text.hasSuffix("\r\n"))
    }

    @Test func fingerprintsRoundTrip() throws {
        let fingerprint = CertificateFingerprint(algorithm: "SHA-256", bytes: [0x0A, 0xFF, 0x00])
        #expect(fingerprint.sdpValue == "sha-256 0A:FF:00")
        #expect(CertificateFingerprint(sdpValue: fingerprint.sdpValue) == fingerprint)
        #expect(CertificateFingerprint(sdpValue: "sha-256 0A:F") == nil)
        #expect(CertificateFingerprint(sdpValue: "sha-256 0A::FF") == nil)
    }

    @Test func unreadableLinesAreRefusedOrSkipped() throws {
        #expect(throws: WireError.self) { try SessionDescription(parsing: "") }
        #expect(throws: WireError.self) { try SessionDescription(parsing: "v=1\r\no=- 1 1 IN IP4 x\r\n") }
        #expect(throws: WireError.self) { try SessionDescription(parsing: "v=0\r\nhello\r\n") }
        #expect(throws: WireError.self) { try SessionDescription(parsing: "v=0\r\no=- 1 1 IN IP4 x\r\nm=audio\r\n") }
        #expect(throws: WireError.self) { try SessionDescription(parsing: "v=0\r\no=- 1 1 IN IP4 x\r\ns=a\u{1B}[2J\r\n") }
        #expect(throws: WireError.self) { try SessionDescription(parsing: "v=0\r\ns=-\r\n") }
        // Attributes a reader cannot use are skipped, not trusted.
        let odd = try SessionDescription(parsing: """
            v=0\r
            o=- 1 1 IN IP4 x\r
            m=audio 9 UDP/TLS/RTP/SAVPF 111\r
            a=rtpmap:300 opus/48000\r
            a=rtpmap:111 opus\r
            a=extmap:0 urn:x\r
            a=ice-ufrag:a!\r
            a=ice-pwd:short\r
            a=ssrc:notanumber cname:x\r
            a=setup:sideways\r

            """)
        let section = odd.media[0]
        #expect(section.rtpMaps.isEmpty)
        #expect(section.headerExtensions.isEmpty)
        #expect(section.iceUsernameFragment == nil)
        #expect(section.icePassword == nil)
        #expect(section.ssrcs.isEmpty)
        #expect(section.setup == nil)
    }

    @Test func aClientHelloStartsAHandshakeAndNothingElseDoes() {
        // A DTLS 1.2 record: handshake, epoch 0, carrying the start of a ClientHello.
        let hello: [UInt8] = [22, 0xFE, 0xFD, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12] + [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        #expect(hello.withUnsafeBytes { DTLSRecordHeader.startsHandshake($0) })
        var later = hello
        later[4] = 1
        #expect(!later.withUnsafeBytes { DTLSRecordHeader.startsHandshake($0) }, "epoch 1")
        var serverHello = hello
        serverHello[13] = 2
        #expect(!serverHello.withUnsafeBytes { DTLSRecordHeader.startsHandshake($0) })
        #expect(!Array(hello.dropLast()).withUnsafeBytes { DTLSRecordHeader.startsHandshake($0) }, "a record cut short")
        #expect((hello + hello).withUnsafeBytes { DTLSRecordHeader.records(in: $0) } == 2)
    }
}
