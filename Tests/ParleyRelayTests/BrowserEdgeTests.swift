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
        /// A stand-in browser's offer, the answer as it reads it, and its ICE check
        /// (``StandInBrowser``, shared with the cluster tests).
        static func offer(fingerprint: CertificateFingerprint, ssrc: UInt32 = 1111) -> String {
            StandInBrowser.offer(fingerprint: fingerprint, ssrc: ssrc)
        }

        typealias Answer = StandInBrowser.Answer

        static func check(username: String, password: String, transaction: UInt32 = 1) throws -> [UInt8] {
            try StandInBrowser.check(username: username, password: password, transaction: transaction)
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

        /// A relay behind a NAT, a port forward or a proxy (`--public-address`): browsers are
        /// told that address and port, not the one the relay listens on, nor the page's host.
        @Test func anOperatorsPublicAddressIsTheBrowsersCandidate() throws {
            let fixture = try RelayFixture.start {
                $0.acceptsBrowsers = true
                $0.browserCandidate = HostAndPort(host: "198.51.100.7", port: 17_800)
            }
            defer { fixture.stop() }
            let offer = Self.offer(fingerprint: try DTLSContext().fingerprint)
            guard case let .success(member) = fixture.relay.acceptBrowserOffer(
                offer, token: fixture.token(room: "call", identity: "ada"), candidateHost: "127.0.0.1") else {
                Issue.record("a valid offer was refused")
                return
            }
            #expect(member.answer.contains("a=candidate:1 1 udp 2130706431 198.51.100.7 17800 typ host"), "\(member.answer)")
            #expect(!member.answer.contains("2130706431 127.0.0.1"), "the listening address is still a candidate")
        }

        // MARK: Media both ways

        /// A stand-in browser connected to the relay: its page, its socket, and its SRTP both ways.
        typealias ConnectedBrowser = StandInBrowser

        /// A browser that offers slots hears each member on a slot of their own, marked with its
        /// MID over the real SRTP path; a member beyond the slots on the shared section; and a
        /// member who joins after one left, on the slot that member had.
        @Test func eachMemberReachesTheBrowserOnASlotOfTheirOwn() throws {
            let fixture = try Self.browserRelay()
            defer { fixture.stop() }
            let connected = try ConnectedBrowser.connect(to: fixture, identity: "ada", room: "call", slots: 2)
            let answer = try SessionDescription(parsing: connected.page.answer)
            #expect(answer.media.map(\.direction) == [.sendrecv, .sendonly, .sendonly])
            let bob = try fixture.member("bob", room: "call")
            let cy = try fixture.member("cy", room: "call")
            let dee = try fixture.member("dee", room: "call")
            #expect(bob.waitForRoster(["ada", "bob", "cy", "dee"]))
            func mids(_ members: [TestClient], from sequence: UInt16) -> [UInt32: Set<String>] {
                for offset in 0..<5 as Range<UInt16> { for member in members { member.sendRTP(sequence: sequence + offset) } }
                var byVoice: [UInt32: Set<String>] = [:]
                for heard in connected.receiveMids(count: 5 * members.count, timeout: 2) { byVoice[heard.ssrc, default: []].insert(heard.mid ?? "none") }
                return byVoice
            }
            // One at a time, so which voice comes first is known.
            #expect(mids([bob], from: 0) == [bob.ssrc: ["1"]])
            #expect(mids([cy], from: 0) == [cy.ssrc: ["2"]])
            #expect(mids([dee], from: 0) == [dee.ssrc: ["0"]], "a third voice shares the microphone's section")
            #expect(mids([bob, cy, dee], from: 5) == [bob.ssrc: ["1"], cy.ssrc: ["2"], dee.ssrc: ["0"]], "a voice moved")

            // Bob leaves; eve joins and gets his slot; dee stays where the browser bound her.
            bob.send(ControlMessage(sequence: bob.takeSequence(), isReliable: true, body: .leave(.init())))
            let eve = try fixture.member("eve", room: "call")
            #expect(cy.waitForRoster(["ada", "cy", "dee", "eve"]))
            // The page's roster (which frees the slot) reaches the browser member on its loop.
            #expect(Self.waitUntil(seconds: 2) { connected.page.events(after: 0).events.last { $0.kind == "roster" }?.roster?.contains { $0.identity == "bob" } == false })
            #expect(mids([eve, dee, cy], from: 20) == [eve.ssrc: ["1"], cy.ssrc: ["2"], dee.ssrc: ["0"]])
        }

        static func waitUntil(seconds: Double, _ condition: () -> Bool) -> Bool {
            let deadline = now() + seconds
            while now() < deadline {
                if condition() { return true }
                Thread.sleep(forTimeInterval: 0.05)
            }
            return condition()
        }


        @Test func aBrowserAndAMemberHearEachOtherThroughTheRoom() throws {
            let fixture = try Self.browserRelay()
            defer { fixture.stop() }
            let bob = try fixture.member("bob", room: "call")
            let connected = try ConnectedBrowser.connect(to: fixture, identity: "ada", room: "call")
            let page = connected.page

            // The room: bob sees the browser member in his roster; the page sees both.
            #expect(bob.waitForRoster(["ada", "bob"]), "the browser member never reached the roster")
            #expect(page.events(after: 0).events.contains { $0.kind == "connected" })

            // The browser's SRTP reaches bob as plain RTP, payload untouched.
            for sequence in 0..<20 as Range<UInt16> { try connected.sendRTP(sequence: sequence) }
            bob.pump(timeout: 2) { client in client.mediaInbox.compactMap(origin(ofMedia:)).filter { $0.ssrc == 1111 }.count >= 20 }
            let heardByBob = bob.mediaInbox.compactMap(origin(ofMedia:)).filter { $0.ssrc == 1111 }.map(\.sequence)
            #expect(Set(heardByBob) == Set(0..<20), "bob heard \(heardByBob.count) of the browser's 20 packets")

            // Bob's RTP reaches the browser as SRTP it opens with its keys.
            for sequence in 0..<20 as Range<UInt16> { bob.sendRTP(sequence: sequence) }
            let heardByBrowser = connected.receiveRTP(count: 20, timeout: 2).filter { $0.ssrc == bob.ssrc }.map(\.sequence)
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

        /// A `parley` sender's RED carries the frames one and three packets back; Chromium's
        /// NetEq holds too little to wait for the copy three back, so the relay adds the frame
        /// two back to each copy for a browser. What the browser notices: after two or three
        /// packets lost in a row, the first packet that arrives carries every frame it missed,
        /// byte for byte as the sender encoded it (across the wrap of sequence numbers and
        /// timestamps); the packet's own header and the sender's copies are unchanged.
        @Test func theFirstPacketAfterABurstOfUpToThreeCarriesEveryFrameTheBrowserMissed() throws {
            let fixture = try Self.browserRelay()
            defer { fixture.stop() }
            let bob = try fixture.member("bob", room: "call", capabilities: [.redundantAudio])
            let connected = try ConnectedBrowser.connect(to: fixture, identity: "ada", room: "call")
            #expect(bob.waitForRoster(["ada", "bob"]))

            let firstSequence: UInt16 = 65_530
            let firstTimestamp = UInt32.max - 4 * 960
            func frame(_ index: Int) -> [UInt8] { [UInt8](repeating: UInt8(index + 1), count: 40 + index % 3) }
            func timestamp(_ index: Int) -> UInt32 { firstTimestamp &+ UInt32(index) * 960 }
            let count = 16
            for index in 0..<count {
                let copies = [3, 1].filter { index >= $0 }.map {
                    OwnedREDPayload.Block(payloadType: RTPHeader.opusPayloadType, timestampOffset: UInt16($0 * 960), data: frame(index - $0))
                }
                let payload = try OwnedREDPayload(
                    redundant: copies, primary: .init(payloadType: RTPHeader.opusPayloadType, timestampOffset: 0, data: frame(index))).serialized()
                bob.send(try RTPHeader(payloadType: RTPHeader.redPayloadType, sequenceNumber: firstSequence &+ UInt16(index),
                                       timestamp: timestamp(index), ssrc: bob.ssrc).serialized(payload: payload))
            }
            let packets = connected.receivePackets(count: count, timeout: 3, where: { packet in
                packet.withUnsafeBytes { (try? RTPPacketView(parsing: $0))?.ssrc } == bob.ssrc
            })
            try #require(packets.count == count, "the browser got \(packets.count) of bob's \(count) packets")

            // Each packet the browser got, by its index: the frames it carries, by timestamp.
            var carried: [Int: [UInt32: [UInt8]]] = [:]
            for packet in packets {
                try RTPPacketView.withParsed(packet) { view in
                    #expect(view.payloadType == RTPHeader.redPayloadType && view.ssrc == bob.ssrc)
                    let index = Int(view.sequenceNumber &- firstSequence)
                    #expect(view.timestamp == timestamp(index))
                    let red = try OwnedREDPayload(parsing: Array(view.payload))
                    #expect(red.primary.data == frame(index))
                    #expect(red.redundant.map(\.timestampOffset) == [3, 2, 1].filter { index >= $0 }.map { UInt16($0 * 960) },
                            "packet \(index) carries copies at \(red.redundant.map(\.timestampOffset)), oldest first")
                    var frames = [view.timestamp: red.primary.data]
                    for copy in red.redundant { frames[view.timestamp &- UInt32(copy.timestampOffset)] = copy.data }
                    carried[index] = frames
                }
            }
            for burst in 1...3 {
                for start in 3..<(count - burst) {
                    let after = try #require(carried[start + burst])
                    for lost in start..<(start + burst) {
                        #expect(after[timestamp(lost)] == frame(lost),
                                "after losing \(burst) from packet \(start), packet \(start + burst) lacks frame \(lost)")
                    }
                }
            }
        }

        /// In a cluster the browser's offer starts placing its room; a handshake that arrives
        /// before the placement lands waits (nothing kept, its hello dropped) and the browser's
        /// own retransmission joins it, rather than the page being told to reload.
        @Test func aBrowserWhoseRoomIsStillBeingPlacedJoinsOnceThePlacementLands() throws {
            let placement = PlacementLandingLater(after: 1.5)
            let fixture = try RelayFixture.start(placement: placement) { $0.acceptsBrowsers = true }
            defer { fixture.stop() }
            let started = Date()
            let connected = try ConnectedBrowser.connect(to: fixture, identity: "ada", room: "call")
            let waited = Date().timeIntervalSince(started)
            #expect(waited >= 1.4, "the handshake finished \(waited) s in, before the room was placed")
            #expect(!connected.page.isEnded, "the page was ended: \(connected.page.events(after: 0).events)")
            let bob = try fixture.member("bob", room: "call")
            #expect(bob.waitForRoster(["ada", "bob"]), "the browser that waited for its room never reached the roster")
            for sequence in 0..<10 as Range<UInt16> { try connected.sendRTP(sequence: sequence) }
            #expect(bob.pump(timeout: 2) { $0.mediaInbox.compactMap(origin(ofMedia:)).filter { $0.ssrc == 1111 }.count >= 10 },
                    "bob did not hear the browser that waited for its room")
            let metrics = try fixture.relay.metricsText()
            #expect(metricValue(metrics, #"parley_relay_packets_dropped_total{reason="placement_pending"}"#).map { $0 >= 1 } == true)
        }

        /// A browser member that left is freed, with its DTLS connection and SRTP contexts, even
        /// while its page is still held (its signalling socket keeps it as long as it is open).
        @Test func aBrowserMemberThatLeftIsFreedWithItsDTLSAndSRTP() throws {
            let fixture = try Self.browserRelay()
            defer { fixture.stop() }
            let bob = try fixture.member("bob", room: "call")
            weak var leg: BrowserLeg?
            weak var transport: BrowserTransport?
            weak var dtls: DTLSConnection?
            weak var outbound: SRTPContext?
            let page: BrowserMember
            do {
                let connected = try ConnectedBrowser.connect(to: fixture, identity: "ada", room: "call")
                page = connected.page
                #expect(bob.waitForRoster(["ada", "bob"]))
                let held = try #require(page.leg)
                leg = held
                transport = held.browserTransport
                dtls = held.dtls
                outbound = held.browserTransport.outbound
                page.leave()
            }
            #expect(bob.waitForRoster(["bob"]), "the browser member stayed in the roster after it left")
            #expect(waitFor(3) { leg == nil && transport == nil && dtls == nil && outbound == nil },
                    "the leg that left is still alive: leg \(leg != nil), transport \(transport != nil), DTLS \(dtls != nil), SRTP \(outbound != nil)")
            #expect(page.isEnded)
        }

        /// Whoever holds an offer's credentials can send its ICE check and ClientHello from any
        /// source address; from a `parley` member's, the hello is refused and the member stays,
        /// still heard.
        @Test func aBrowserHandshakeFromAMembersAddressIsRefusedAndTheMemberStays() throws {
            let fixture = try Self.browserRelay()
            defer { fixture.stop() }
            let bob = try fixture.member("bob", room: "call")
            let carol = try fixture.member("carol", room: "call")
            #expect(carol.waitForRoster(["bob", "carol"]))
            #expect(throws: TestFailure.self) { try ConnectedBrowser.connect(to: fixture, identity: "mallory", room: "call", from: bob, handshakeSeconds: 3) }
            carol.drain()
            #expect(carol.latestRoster.map { Set($0.map(\.identity)) } == ["bob", "carol"], "the roster changed: \(carol.latestRoster?.map(\.identity) ?? [])")
            carol.mediaInbox = []
            for sequence in 0..<5 as Range<UInt16> { bob.sendRTP(sequence: sequence) }
            #expect(carol.pump(timeout: 2) { $0.mediaInbox.compactMap(origin(ofMedia:)).filter { $0.ssrc == bob.ssrc }.count >= 5 },
                    "bob is no longer heard after a browser's handshake from his address")
            let metrics = try fixture.relay.metricsText()
            #expect(metricValue(metrics, #"parley_relay_packets_dropped_total{reason="dtls_refused"}"#).map { $0 >= 1 } == true)
        }

        /// The page's texts and moderation mean what a `parley` client's do: a text reaches the
        /// room's other members with the page's identity, theirs reach the page; a server-mute
        /// from a page whose token is not a moderator's is refused by the relay (the page's
        /// buttons decide nothing), and from a moderator's it mutes the member, who sees it.
        @Test func aPagesTextsAndModerationMeanWhatAMembersDo() throws {
            let fixture = try Self.browserRelay()
            defer { fixture.stop() }
            let bob = try fixture.member("bob", room: "call", capabilities: [.textMessages])
            let ada = try ConnectedBrowser.connect(to: fixture, identity: "ada", room: "call")
            #expect(bob.waitForRoster(["ada", "bob"]))

            #expect(ada.page.say("hello from the page") == nil)
            #expect(ada.page.say(" ") != nil, "an empty text was taken")
            #expect(ada.page.say(String(repeating: "x", count: 501))?.contains("500 bytes") == true)
            let texts = { bob.controlInbox.compactMap { if case let .text(text) = $0.body { return text }; return nil } }
            #expect(bob.pump(timeout: 2) { _ in texts().contains { $0.sender == "ada" && $0.text == "hello from the page" } },
                    "bob never got the page's text: \(texts())")
            #expect(texts().count == 1, "bob got \(texts().count) texts")
            bob.send(ControlMessage(sequence: 900, isReliable: true, body: .text(ControlMessage.Text(number: 1, text: "hello from bob"))))
            #expect(waitFor(2) { ada.page.events(after: 0).events.contains { $0.kind == "text" && $0.identity == "bob" && $0.text == "hello from bob" } },
                    "the page never got bob's text")

            // What the wire would not carry from a `parley` client is not sent from the page either.
            #expect(ada.page.moderate(.kick, target: String(repeating: "b", count: 300)) != .sent)
            #expect(ada.page.moderate(.kick, target: "bob", reason: String(repeating: "r", count: 1_000)) != .sent)
            #expect(ada.page.moderate(.serverMute, target: "bo\u{202E}b") != .sent)

            // Not a moderator: refused by the relay, bob unmuted.
            #expect(ada.page.moderate(.serverMute, target: "bob") == .sent)
            #expect(waitFor(2) { ada.page.events(after: 0).events.contains { $0.kind == "notice" && $0.text?.contains("moderator") == true } },
                    "a server-mute from a page without a moderator's token was not refused: \(ada.page.events(after: 0).events)")
            bob.pump(timeout: 0.3)
            #expect(bob.latestRoster?.first { $0.identity == "bob" }?.isServerMuted == false)

            // A moderator's page: bob is muted for the room, and his roster says so.
            let cy = try ConnectedBrowser.connect(to: fixture, identity: "cy", room: "call", ssrc: 2222, isModerator: true)
            #expect(bob.waitForRoster(["ada", "bob", "cy"]))
            #expect(waitFor(2) { cy.page.events(after: 0).events.contains { $0.kind == "joined" && $0.moderator == true } })
            #expect(cy.page.moderate(.serverMute, target: "bob") == .sent)
            #expect(bob.pump(timeout: 2) { client in client.latestRoster?.first { $0.identity == "bob" }?.isServerMuted == true },
                    "bob was not server-muted by the moderator's page")
            #expect(waitFor(2) { cy.page.events(after: 0).events.contains { $0.kind == "moderated" } })
            #expect(waitFor(2) { ada.page.events(after: 0).events.last { $0.kind == "roster" }?.roster?.first { $0.identity == "bob" }?.serverMuted == true },
                    "the other page's roster does not show bob muted by a moderator")
        }

        /// The page's requests spend the same control budget a `parley` member's do; leaving
        /// is taken over it.
        @Test func aPagesRequestsAreRateLimitedAsAMembersAre() throws {
            let fixture = try Self.browserRelay()
            defer { fixture.stop() }
            let bob = try fixture.member("bob", room: "call")
            let connected = try ConnectedBrowser.connect(to: fixture, identity: "ada", room: "call")
            #expect(bob.waitForRoster(["ada", "bob"]))
            for round in 0..<400 { connected.page.setState(muted: round % 2 == 0, deafened: false) }
            #expect(waitFor(3) {
                (try? fixture.relay.metricsText()).flatMap { metricValue($0, #"parley_relay_packets_dropped_total{reason="rate_limited"}"#) }.map { $0 > 100 } == true
            }, "400 requests at once from a page were not limited")
            connected.page.leave()
            #expect(bob.waitForRoster(["bob"]), "leaving was lost to the rate limit")
        }

        /// A member who sends one sequence number twice (a hostile client can, with other bytes)
        /// gets it to the browser once: SRTP never encrypts two packets under one nonce.
        @Test func aRepeatedSequenceNumberReachesTheBrowserOnce() throws {
            let fixture = try Self.browserRelay()
            defer { fixture.stop() }
            let bob = try fixture.member("bob", room: "call")
            let connected = try ConnectedBrowser.connect(to: fixture, identity: "ada", room: "call")
            #expect(bob.waitForRoster(["ada", "bob"]))
            for sequence in 0..<5 as Range<UInt16> { bob.sendRTP(sequence: sequence) }
            var other = bob.rtp(sequence: 4)
            other[other.count - 1] ^= 0xFF
            bob.send(other)
            bob.sendRTP(sequence: 5)
            let heard = connected.receiveRTP(count: 7, timeout: 2).filter { $0.ssrc == bob.ssrc }
            #expect(heard.filter { $0.sequence == 4 }.count == 1, "sequence 4 reached the browser \(heard.filter { $0.sequence == 4 }.count) times")
            #expect(Set(heard.map(\.sequence)) == Set(0...5), "the browser heard \(heard.map(\.sequence))")
            #expect(bob.waitForRoster(["ada", "bob"]), "the browser member left after the repeat")
        }

        /// What arrives is counted under its own kind: STUN as stun, DTLS as dtls, the rest as unknown.
        @Test func receivedPacketsAreCountedUnderTheirKind() throws {
            #expect(PacketKind.allCases.enumerated().allSatisfy { $0.element.index == $0.offset })
            let fixture = try Self.browserRelay()
            defer { fixture.stop() }
            let stranger = TestClient(relayPort: fixture.port)
            for _ in 0..<3 { stranger.send([0x00, 0x01, 0x00, 0x00]) }
            for _ in 0..<2 { stranger.send([22, 0xFE, 0xFD]) }
            stranger.send([0xF0, 0x00])
            let expected: [String: Double] = ["stun": 3, "dtls": 2, "unknown": 1]
            var counted: [String: Double] = [:]
            _ = waitFor(3) {
                guard let metrics = try? fixture.relay.metricsText() else { return false }
                for kind in expected.keys { counted[kind] = metricValue(metrics, #"parley_relay_packets_received_total{kind="\#(kind)"}"#) ?? 0 }
                return counted == expected
            }
            #expect(counted == expected)
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

extension StandInBrowser {
    /// Offer, ICE check and DTLS handshake with `fixture`'s relay, for `identity` in `room`; the
    /// relay's answer to the check is no larger than the check.
    static func connect(to fixture: RelayFixture, identity: String, room: String, ssrc: UInt32 = 1111, slots: Int = 0,
                        from client: TestClient? = nil, handshakeSeconds: Double = 15, isModerator: Bool = false) throws -> StandInBrowser {
        try connect(to: fixture.relay, port: fixture.port, token: fixture.token(room: room, identity: identity, isModerator: isModerator), ssrc: ssrc,
                    slots: slots, from: client, handshakeSeconds: handshakeSeconds) { reply, check in #expect(reply.count <= check.count) }
    }

    func receiveRTP(count: Int, timeout: Double) -> [(ssrc: UInt32, sequence: UInt16, payload: [UInt8])] {
        receiveRTP(count: count, timeout: timeout) { Issue.record("the browser could not open an SRTP packet from the relay") }
    }
}

/// A cluster's placement as a slow store makes it: every room is still being placed until
/// `after` seconds have passed, then lives here. The relay's side of the seam, without etcd
/// (the cluster tests run the real one).
private final class PlacementLandingLater: RoomPlacement {
    private let landsAt: Date
    init(after seconds: Double) { landsAt = Date().addingTimeInterval(seconds) }
    private var landed: Bool { Date() >= landsAt }
    func route(room: String, region: String?, whenDecided: @escaping @Sendable (PlacementRoute) -> Void) -> PlacementRoute {
        if landed { return .here }
        DispatchQueue.global().asyncAfter(deadline: .now() + landsAt.timeIntervalSinceNow) { whenDecided(.here) }
        return .pending
    }
    func routePinned(room: String, whenDecided: @escaping @Sendable (PlacementRoute) -> Void) -> PlacementRoute {
        route(room: room, region: nil, whenDecided: whenDecided)
    }
    func fallbacks(limit: Int) -> [ControlMessage.ClusterRelay] { [] }
    func start(_ relay: PlacedRelay) {}
    func stop() {}
}
