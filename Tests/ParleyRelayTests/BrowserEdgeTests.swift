import Foundation
import ParleyBasics
@testable import ParleyRelay
import ParleyRelayTestSupport
import ParleyWebRTC
import ParleyWire
import Testing

/// Inside the relay-over-UDP suite, one at a time: the hostile test floods the machine.
extension RelayOverUDP {
    /// Browser members at the relay's one UDP port, without a browser: a stand-in speaks what
    /// Chromium speaks (its offer, ICE checks signed with the answer's password, an OpenSSL DTLS
    /// client whose certificate its offer names, SRTP with the keys the handshake exported) over
    /// real UDP on 127.0.0.1, beside a `parley` member (the plaintext test client on an
    /// `--insecure` relay). The browser test in ParleyCallTests does the same with Chromium.
    @Suite("Browser members")
    struct BrowserEdgeTests {
        /// A relay that takes browsers, and a stand-in browser's offer for `identity`.
        static func offer(fingerprint: CertificateFingerprint, ssrc: UInt32 = 1111) -> String {
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
        struct Answer {
            let ufrag: String
            let password: String
            let fingerprint: CertificateFingerprint

            init(_ text: String) throws {
                let description = try SessionDescription(parsing: text)
                let section = try #require(description.media.first)
                func attribute(_ name: String) -> String? { section.attributes.first { $0.name == name }?.value }
                ufrag = try #require(attribute("ice-ufrag"))
                password = try #require(attribute("ice-pwd"))
                fingerprint = try #require(attribute("fingerprint").flatMap(CertificateFingerprint.init(sdpValue:)))
            }
        }

        /// An ICE check as Chromium sends it, signed with `password`.
        static func check(username: String, password: String, transaction: UInt32 = 1) throws -> [UInt8] {
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

        static func browserRelay() throws -> RelayFixture {
            try RelayFixture.start { $0.acceptsBrowsers = true }
        }

        // MARK: Signalling

        @Test func anOfferWithoutAValidTokenIsRefusedBeforeAnythingIsKept() throws {
            let fixture = try Self.browserRelay()
            defer { fixture.stop() }
            let edge = try #require(fixture.relay.browserEdge)
            let offer = Self.offer(fingerprint: try DTLSContext().fingerprint)
            let otherSecret = TokenSecret.random()
            let now = unixNow()
            let refusals: [(String, String)] = [
                ("", "empty"),
                ("not.a.token", "malformed"),
                (AccessToken(identity: "ada", room: "call", issuedAt: now, expiresAt: now + 60).signed(with: otherSecret), "another relay's"),
                (fixture.token(room: "call", identity: "ada", lifetime: -3_600), "expired"),
            ]
            for (token, what) in refusals {
                guard case let .failure(refusal) = fixture.relay.acceptBrowserOffer(offer, token: token, candidateHost: "127.0.0.1") else {
                    Issue.record("a \(what) token was accepted")
                    continue
                }
                #expect(refusal.status == 403, "\(what): \(refusal.message)")
                #expect(!refusal.message.isEmpty)
            }
            #expect(edge.offers.count == 0, "a refused offer left state behind")
            // A good token with an offer the relay cannot use: refused too, and nothing kept.
            let token = fixture.token(room: "call", identity: "ada")
            for bad in ["", "v=0\r\n", offer.replacingOccurrences(of: "a=fingerprint", with: "a=nofingerprint"), String(offer.prefix(200))] {
                guard case let .failure(refusal) = fixture.relay.acceptBrowserOffer(bad, token: token, candidateHost: "127.0.0.1") else {
                    Issue.record("an unusable offer was answered")
                    continue
                }
                #expect(refusal.status == 400, "\(refusal.message)")
            }
            #expect(edge.offers.count == 0)
            guard case let .success(member) = fixture.relay.acceptBrowserOffer(offer, token: token, candidateHost: "127.0.0.1") else {
                Issue.record("a valid offer was refused")
                return
            }
            #expect(edge.offers.count == 1)
            #expect(member.answer.contains("a=candidate:1 1 udp 2130706431 127.0.0.1 \(fixture.port) typ host"))
            #expect(member.answer.contains("a=sendrecv"))
            #expect(member.answer.contains("a=ice-lite"))
        }

        // MARK: Media both ways

        @Test func aBrowserAndAMemberHearEachOtherThroughTheRoom() throws {
            let fixture = try Self.browserRelay()
            defer { fixture.stop() }
            let bob = try fixture.member("bob", room: "call")
            let browserContext = try DTLSContext()
            guard case let .success(page) = fixture.relay.acceptBrowserOffer(
                Self.offer(fingerprint: browserContext.fingerprint), token: fixture.token(room: "call", identity: "ada"), candidateHost: "127.0.0.1") else {
                Issue.record("the offer was refused")
                return
            }
            let answer = try Answer(page.answer)
            let browser = TestClient(relayPort: fixture.port)
            browser.ssrc = 1111

            // ICE: the check is answered, no larger than itself.
            let check = try Self.check(username: "\(answer.ufrag):brws", password: answer.password)
            browser.send(check)
            let reply = try #require(browser.receiveRaw(timeout: 2), "the relay did not answer an authentic ICE check")
            #expect(reply.count <= check.count)
            #expect(reply.first == 0x01, "a binding success response")

            // DTLS: the stand-in is the client, as a browser answered `setup:passive` is.
            let dtls = try DTLSConnection(context: browserContext, isServer: false, peerFingerprint: answer.fingerprint)
            dtls.start()
            let deadline = now() + 5
            while dtls.state == .handshaking, now() < deadline {
                for datagram in dtls.takeDatagrams() { browser.send(datagram) }
                if let datagram = browser.receiveRaw(timeout: 0.2), (20...63).contains(datagram[0]) {
                    datagram.withUnsafeBytes { _ = dtls.receive($0) }
                }
            }
            for datagram in dtls.takeDatagrams() { browser.send(datagram) }
            #expect(dtls.state == .established)
            let keys = try #require(dtls.srtpKeys())
            let outbound = try #require(SRTPContext(profile: keys.profile, keyAndSalt: keys.client, direction: .outbound))
            let inbound = try #require(SRTPContext(profile: keys.profile, keyAndSalt: keys.server, direction: .inbound))

            // The room: bob sees the browser member in his roster; the page sees both.
            #expect(bob.waitForRoster(["ada", "bob"]), "the browser member never reached the roster")
            #expect(page.events(after: 0).events.contains { $0.kind == "connected" })

            // The browser's SRTP reaches bob as plain RTP, payload untouched.
            for sequence in 0..<20 as Range<UInt16> {
                var packet = browser.rtp(sequence: sequence) + [UInt8](repeating: 0, count: 32)
                let size = packet.count - 32
                let protected = try #require(packet.withUnsafeMutableBytes { outbound.protect($0, count: size, rtcp: false) })
                browser.send(Array(packet.prefix(protected)))
            }
            bob.pump(timeout: 2) { client in client.mediaInbox.compactMap(origin(ofMedia:)).filter { $0.ssrc == 1111 }.count >= 20 }
            let heardByBob = bob.mediaInbox.compactMap(origin(ofMedia:)).filter { $0.ssrc == 1111 }.map(\.sequence)
            #expect(Set(heardByBob) == Set(0..<20), "bob heard \(heardByBob.count) of the browser's 20 packets")

            // Bob's RTP reaches the browser as SRTP it opens with its keys.
            for sequence in 0..<20 as Range<UInt16> { bob.sendRTP(sequence: sequence) }
            var heardByBrowser: [UInt16] = []
            let until = now() + 2
            while heardByBrowser.count < 20, now() < until {
                guard var datagram = browser.receiveRaw(timeout: 0.2), datagram.withUnsafeBytes({ PacketKind($0) }) == .rtp else { continue }
                let count = datagram.count
                guard case let .success(opened) = datagram.withUnsafeMutableBytes({ inbound.unprotect($0, count: count, rtcp: false) }) else {
                    Issue.record("the browser could not open an SRTP packet from the relay")
                    continue
                }
                if let origin = origin(ofMedia: Array(datagram.prefix(opened))), origin.ssrc == bob.ssrc { heardByBrowser.append(origin.sequence) }
            }
            #expect(Set(heardByBrowser) == Set(0..<20), "the browser heard \(heardByBrowser.count) of bob's 20 packets")

            // The page's mute button: bob's roster says so.
            #expect(page.setState(muted: true, deafened: false))
            #expect(bob.pump(timeout: 2) { client in client.latestRoster?.first { $0.identity == "ada" }?.state.contains(.muted) == true })
            let roster = page.events(after: 0).events.last { $0.kind == "roster" }?.roster ?? []
            #expect(Set(roster.map(\.identity)) == ["ada", "bob"])

            // Leaving (WHIP's DELETE): out of the room, the page told.
            page.leave()
            #expect(bob.waitForRoster(["bob"]), "the browser member stayed in the roster after it left")
            #expect(page.isEnded || waitFor(2) { page.isEnded })
        }

        // MARK: Hostile input

        /// Random and truncated STUN, DTLS and SRTP at the relay's port, from strangers and from an
        /// address that passed an ICE check: nothing crashes, no stranger is answered at all, the
        /// authentic check is answered no larger than itself before and after, and the relay still
        /// forwards a member's media.
        @Test func hostileSTUNDTLSAndSRTPCrashNothingAndStrangersGetNoAnswer() throws {
            let fixture = try RelayFixture.start(threads: 2) { $0.acceptsBrowsers = true }
            defer { fixture.stop() }
            let browserContext = try DTLSContext()
            guard case let .success(page) = fixture.relay.acceptBrowserOffer(
                Self.offer(fingerprint: browserContext.fingerprint), token: fixture.token(room: "call", identity: "ada"), candidateHost: "127.0.0.1") else {
                Issue.record("the offer was refused")
                return
            }
            let answer = try Answer(page.answer)
            let check = try Self.check(username: "\(answer.ufrag):brws", password: answer.password)
            let checked = TestClient(relayPort: fixture.port)
            checked.send(check)
            let reply = try #require(checked.receiveRaw(timeout: 2))
            #expect(reply.count <= check.count)

            var rng = SeededGenerator(seed: 0xB0_05E7)
            let strangers = (0..<8).map { _ in TestClient(relayPort: fixture.port, receiveBuffer: 64 << 10) }
            let clientHello = Self.clientHello(context: browserContext, relayFingerprint: answer.fingerprint)
            let seeds: [[UInt8]] = [check, clientHello, try Self.check(username: "\(answer.ufrag):brws", password: "wrong-password-wrong-password")]
            var sentToStrangers = 0
            for round in 0..<20_000 {
                let bytes = Self.hostile(&rng, seeds: seeds)
                if round % 5 == 0 {
                    // From the checked address: its garbage DTLS may start a handshake that then fails.
                    checked.send(bytes)
                } else {
                    strangers.randomElement(using: &rng)!.send(bytes)
                    sentToStrangers += 1
                }
                if round % 200 == 0 { usleep(2_000) }
            }
            // Garbage in RTP's range gets what it always got from a relay (a short "not joined",
            // never larger than itself, within the source's budget); STUN and DTLS get nothing.
            var browserAnswersToStrangers = 0
            for stranger in strangers {
                while let answer = stranger.receiveRaw(timeout: 0.05) {
                    if let first = answer.first, first <= 3 || (20...63).contains(first) { browserAnswersToStrangers += 1 }
                }
            }
            #expect(browserAnswersToStrangers == 0, "strangers got \(browserAnswersToStrangers) STUN or DTLS answers to \(sentToStrangers) hostile datagrams")
            while let datagram = checked.receiveRaw(timeout: 0.05) {
                // What the checked address may get: STUN answers (no larger than the check) and DTLS.
                if datagram.first.map({ $0 <= 3 }) == true { #expect(datagram.count <= check.count) }
            }

            // Still up and still answering: the authentic check, and a member's media.
            let again = TestClient(relayPort: fixture.port)
            let secondCheck = try Self.check(username: "\(answer.ufrag):brws", password: answer.password, transaction: 9)
            // The flood came from 127.0.0.1 too and spent that host's budget for answers, so the
            // check is sent again until answered, as a browser retransmits its checks.
            var secondReply: [UInt8]?
            let until = now() + 10
            while secondReply == nil, now() < until {
                again.send(secondCheck)
                secondReply = again.receiveRaw(timeout: 0.5)
            }
            #expect(secondReply != nil && secondReply!.count <= secondCheck.count)
            let members = try fixture.room("after", size: 2)
            members[0].sendRTP(sequence: 1)
            #expect(members[1].pump(timeout: 2) { !$0.mediaInbox.isEmpty })
            let metrics = try fixture.relay.metricsText()
            #expect(metricValue(metrics, #"parley_relay_packets_dropped_total{reason="stun_unanswered"}"#).map { $0 > 1_000 } == true)
        }

        /// A ClientHello as the stand-in's OpenSSL writes it.
        static func clientHello(context: DTLSContext, relayFingerprint: CertificateFingerprint) -> [UInt8] {
            guard let client = try? DTLSConnection(context: context, isServer: false, peerFingerprint: relayFingerprint) else { return [22] }
            client.start()
            return client.takeDatagrams().first ?? [22]
        }

        /// Random bytes in STUN's, DTLS's or SRTP's range, or a seed truncated or with bytes flipped.
        static func hostile(_ rng: inout SeededGenerator, seeds: [[UInt8]]) -> [UInt8] {
            switch Int.random(in: 0..<4, using: &rng) {
            case 0:
                let ranges: [ClosedRange<UInt8>] = [0...3, 20...63, 128...191]
                var bytes = (0..<Int.random(in: 0...1_400, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
                if !bytes.isEmpty { bytes[0] = UInt8.random(in: ranges.randomElement(using: &rng)!, using: &rng) }
                return bytes
            case 1:
                let seed = seeds.randomElement(using: &rng)!
                return Array(seed.prefix(Int.random(in: 0..<seed.count, using: &rng)))
            default:
                var seed = seeds.randomElement(using: &rng)!
                // Distinct bytes, so no two flips cancel out into the seed itself.
                var indices = Set<Int>()
                while indices.count < min(Int.random(in: 1...4, using: &rng), seed.count) { indices.insert(Int.random(in: 0..<seed.count, using: &rng)) }
                for index in indices { seed[index] ^= UInt8.random(in: 1...255, using: &rng) }
                return seed
            }
        }
    }
}

func waitFor(_ seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = now() + seconds
    while now() < deadline {
        if condition() { return true }
        usleep(20_000)
    }
    return condition()
}
