import Foundation
import ParleyBasics
import ParleyRelay
import ParleyWebRTC
import ParleyWire

/// A browser member without a browser: it speaks what Chromium speaks to the relay's one UDP
/// port (its offer, ICE checks signed with the answer's password, an OpenSSL DTLS client whose
/// certificate its offer names, SRTP with the keys the handshake exported) over real UDP on
/// 127.0.0.1. The relay tests use it beside `parley` members; the cluster tests put it on one
/// relay of a room that lives on another.
package struct StandInBrowser {
    package let page: BrowserMember
    package let client: TestClient
    package let dtls: DTLSConnection
    /// What the browser protects its media with, and opens the relay's with.
    package let outbound: SRTPContext
    package let inbound: SRTPContext

    /// The offer Chromium makes for a microphone: Opus and RED, the audio level extension; with
    /// `slots`, that many recvonly sections besides and the MID extension, as the page offers.
    package static func offer(fingerprint: CertificateFingerprint, ssrc: UInt32 = 1111, slots: Int = 0) -> String {
        guard slots > 0 else { return microphoneOffer(fingerprint: fingerprint, ssrc: ssrc) }
        let mids = (1...slots).map { String($0) }
        let slotSections = mids.map { mid in
            "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:\(mid)\r\na=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r\na=recvonly\r\na=rtcp-mux\r\na=rtpmap:111 opus/48000/2\r\n"
        }.joined()
        return microphoneOffer(fingerprint: fingerprint, ssrc: ssrc)
            .replacingOccurrences(of: "a=group:BUNDLE 0\r\n", with: "a=group:BUNDLE 0 \(mids.joined(separator: " "))\r\n")
            .replacingOccurrences(of: "a=sendrecv\r\n", with: "a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r\na=sendrecv\r\n")
            + slotSections
    }

    private static func microphoneOffer(fingerprint: CertificateFingerprint, ssrc: UInt32) -> String {
        """
        v=0\r
        o=- 4611731400430051336 2 IN IP4 127.0.0.1\r
        s=-\r
        t=0 0\r
        a=group:BUNDLE 0\r
        m=audio 9 UDP/TLS/RTP/SAVPF 111 63\r
        c=IN IP4 0.0.0.0\r
        a=ice-ufrag:brws\r
        a=ice-pwd:browserpasswordbrowserpassword\r
        a=fingerprint:\(fingerprint.sdpValue)\r
        a=setup:actpass\r
        a=mid:0\r
        a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level\r
        a=sendrecv\r
        a=rtcp-mux\r
        a=rtpmap:111 opus/48000/2\r
        a=fmtp:111 minptime=10;useinbandfec=1\r
        a=rtpmap:63 red/48000/2\r
        a=fmtp:63 111/111\r
        a=ssrc:\(ssrc) cname:x\r

        """
    }

    /// What the stand-in reads from the relay's answer.
    package struct Answer {
        package let ufrag: String
        package let password: String
        package let fingerprint: CertificateFingerprint

        package init(_ text: String) throws {
            let description = try SessionDescription(parsing: text)
            guard let section = description.media.first else { throw TestFailure("the answer has no media section") }
            func attribute(_ name: String) -> String? { section.attributes.first { $0.name == name }?.value }
            guard let ufrag = attribute("ice-ufrag"), let password = attribute("ice-pwd"),
                  let fingerprint = attribute("fingerprint").flatMap(CertificateFingerprint.init(sdpValue:)) else {
                throw TestFailure("the answer lacks ICE credentials or a fingerprint: \(text)")
            }
            (self.ufrag, self.password, self.fingerprint) = (ufrag, password, fingerprint)
        }
    }

    /// An ICE check as Chromium sends it, signed with `password`.
    package static func check(username: String, password: String, transaction: UInt32 = 1) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 300)
        let authentication = STUNAuthentication(password: password)
        let count = try buffer.withUnsafeMutableBytes { raw in
            var writer = try STUNMessageWriter(type: .bindingRequest, transactionID: STUNTransactionID(high: 1, middle: 2, low: transaction), into: raw)
            try writer.appendUsername(username)
            try writer.appendICERole(isControlling: true, tieBreaker: 99)
            try writer.appendUseCandidate()
            try writer.appendPriority(1_853_824_767)
            try writer.appendMessageIntegrity(authentication.sign)
            try writer.appendFingerprint()
            return writer.count
        }
        return Array(buffer.prefix(count))
    }

    /// Offer (through `relay`'s signalling, as the web port calls it), ICE check and DTLS
    /// handshake, as Chromium does them, to the relay's UDP `port`; `client` is the socket the
    /// browser speaks from (a new one unless given). `checkAnswer` sees the ICE answer and the
    /// check it answered.
    /// `identityKey`: the page's X25519 public key, sent with its offer when it can take part
    /// in end-to-end encryption.
    package static func connect(to relay: Relay, port: Int, host: String = "127.0.0.1", token: String, ssrc: UInt32 = 1111, slots: Int = 0,
                                identityKey: [UInt8]? = nil, from client: TestClient? = nil, handshakeSeconds: Double = 15,
                                checkAnswer: (_ reply: [UInt8], _ check: [UInt8]) -> Void = { _, _ in }) throws -> StandInBrowser {
        let browserContext = try DTLSContext()
        let page: BrowserMember
        switch relay.acceptBrowserOffer(offer(fingerprint: browserContext.fingerprint, ssrc: ssrc, slots: slots), token: token, candidateHost: host,
                                         identityKey: identityKey) {
        case let .success(member): page = member
        case let .failure(refusal): throw TestFailure("the offer was refused: \(refusal)")
        }
        let answer = try Answer(page.answer)
        let browser = client ?? TestClient(relayPort: port, relayHost: host)
        if client == nil { browser.ssrc = ssrc }

        let check = try check(username: "\(answer.ufrag):brws", password: answer.password)
        browser.send(check)
        var reply: [UInt8]?
        let checkDeadline = now() + 2
        while reply == nil, now() < checkDeadline {
            if let datagram = browser.receiveRaw(timeout: 0.2), datagram.first == 0x01 { reply = datagram }
        }
        guard let reply else { throw TestFailure("the relay did not answer an authentic ICE check") }
        checkAnswer(reply, check)

        // DTLS: the stand-in is the client, as a browser answered `setup:passive` is.
        let dtls = try DTLSConnection(context: browserContext, isServer: false, peerFingerprint: answer.fingerprint)
        dtls.start()
        // Generous: the cookie exchange adds a round trip, and a loaded machine slows both sides.
        let deadline = now() + handshakeSeconds
        // A lost flight, or a hello the relay let wait (its cluster still placing the room),
        // is sent again on DTLS's own timer, as a browser does.
        while dtls.state == .handshaking, now() < deadline {
            for datagram in dtls.takeDatagrams() { browser.send(datagram) }
            if let datagram = browser.receiveRaw(timeout: 0.1), (20...63).contains(datagram[0]) {
                datagram.withUnsafeBytes { _ = dtls.receive($0) }
            } else {
                dtls.handleTimeout()
            }
        }
        for datagram in dtls.takeDatagrams() { browser.send(datagram) }
        guard dtls.state == .established, let keys = dtls.srtpKeys(),
              let outbound = SRTPContext(profile: keys.profile, keyAndSalt: keys.client, direction: .outbound),
              let inbound = SRTPContext(profile: keys.profile, keyAndSalt: keys.server, direction: .inbound) else {
            throw TestFailure("the DTLS handshake did not complete (\(dtls.state)); the page was told: \(page.events(after: 0).events)")
        }
        return StandInBrowser(page: page, client: browser, dtls: dtls, outbound: outbound, inbound: inbound)
    }

    /// RTP as the browser sends it, protected with its keys.
    package func sendRTP(sequence: UInt16, ssrc: UInt32? = nil) throws {
        var packet = client.rtp(sequence: sequence, ssrc: ssrc) + [UInt8](repeating: 0, count: 32)
        let size = packet.count - 32
        guard let protected = packet.withUnsafeMutableBytes({ outbound.protect($0, count: size, rtcp: false) }) else {
            throw TestFailure("SRTP could not protect a packet")
        }
        client.send(Array(packet.prefix(protected)))
    }

    /// The RTP packets the relay sent the browser within `timeout` (at most `count` of those
    /// `keep` takes), opened with its keys, whole; `failedToOpen` is called for one that does
    /// not open.
    package func receivePackets(count: Int, timeout: Double, failedToOpen: () -> Void = {},
                                where keep: ([UInt8]) -> Bool = { _ in true }) -> [[UInt8]] {
        var heard: [[UInt8]] = []
        let until = now() + timeout
        while heard.count < count, now() < until {
            guard var datagram = client.receiveRaw(timeout: 0.2), datagram.withUnsafeBytes({ PacketKind($0) }) == .rtp else { continue }
            let size = datagram.count
            guard case let .success(opened) = datagram.withUnsafeMutableBytes({ inbound.unprotect($0, count: size, rtcp: false) }) else {
                failedToOpen()
                continue
            }
            let packet = Array(datagram.prefix(opened))
            if keep(packet) { heard.append(packet) }
        }
        return heard
    }

    /// The RTP the relay sent the browser within `timeout`, opened: the sender's SSRC (from
    /// the payload) and the MID the copy carries (extension id 4).
    package func receiveMids(count: Int, timeout: Double) -> [(ssrc: UInt32, mid: String?)] {
        receivePackets(count: count, timeout: timeout, where: { origin(ofMedia: $0) != nil }).compactMap { packet in
            guard let origin = origin(ofMedia: packet) else { return nil }
            let mid = packet.withUnsafeBytes { raw in
                (try? RTPPacketView(parsing: raw))?.headerExtensionElements.first { $0.id == 4 }.map { String(decoding: $0.data, as: UTF8.self) }
            }
            return (origin.ssrc, mid)
        }
    }

    /// The RTP the relay sent the browser within `timeout`, opened: (ssrc, sequence, payload);
    /// `failedToOpen` is called for a packet that does not open with the browser's keys.
    package func receiveRTP(count: Int, timeout: Double, failedToOpen: () -> Void = {}) -> [(ssrc: UInt32, sequence: UInt16, payload: [UInt8])] {
        receivePackets(count: count, timeout: timeout, failedToOpen: failedToOpen, where: { origin(ofMedia: $0) != nil }).compactMap { packet in
            origin(ofMedia: packet).map { ($0.ssrc, $0.sequence, Array(packet.suffix(from: 12))) }
        }
    }
}
