import ParleyBasics
@testable import ParleyRelay
import ParleyRelayTestSupport
import ParleyWebRTC
import ParleyWire
import Testing

/// What the relay does for an end-to-end encrypted room: who may come in, what the roster
/// carries, and the mailbox for sealed media keys, through a real relay over UDP on 127.0.0.1
/// with clients that speak the protocol by hand.
extension RelayOverUDP {
    @Suite("End-to-end encrypted rooms at the relay")
    struct EndToEndRelayTests {
        static let takesPart: ControlMessage.Capabilities = [.endToEndEncryption, .textMessages]

        static func key(_ seed: UInt8) -> [UInt8] { (0..<32).map { seed &+ UInt8($0) } }

        static func keys(_ client: TestClient) -> [ControlMessage.MediaKeys] {
            client.controlInbox.compactMap { if case let .mediaKeys(keys) = $0.body { return keys }; return nil }
        }

        @Test func aRoomMadeEndToEndEncryptedSaysSoAndRefusesWhoCannotTakePartOrWhoAsksForItTooLate() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let ada = try fixture.member("ada", room: "sealed", capabilities: Self.takesPart, identityKey: Self.key(1), endToEnd: true)
            #expect(ada.joined?.isEndToEndEncrypted == true)

            // An older client, or one without an identity key, cannot come in, even with a plain token.
            let old = TestClient(relayPort: fixture.port)
            let refused = old.join(room: "sealed", token: fixture.token(room: "sealed", identity: "old"), ssrc: 7)
            guard case let .error(error) = refused else { Issue.record("an older client joined an end-to-end encrypted room: \(String(describing: refused))"); return }
            #expect(error.code == .endToEndEncryptionRequired && error.message.contains("end-to-end encrypted"))

            // A capable client with a plain token takes part: the room decides.
            let bob = try fixture.member("bob", room: "sealed", capabilities: Self.takesPart, identityKey: Self.key(2))
            #expect(bob.joined?.isEndToEndEncrypted == true)
            #expect(bob.waitForRoster(["ada", "bob"]))
            #expect(bob.latestRoster?.first { $0.identity == "ada" }?.identityKey == Self.key(1), "the roster repeats each identity key")

            // An invite that asks for end-to-end encryption is refused by a room running without it.
            _ = try fixture.member("cy", room: "plain", capabilities: Self.takesPart, identityKey: Self.key(3))
            let late = TestClient(relayPort: fixture.port)
            let answer = late.join(room: "plain", token: fixture.token(room: "plain", identity: "dee", endToEnd: true), ssrc: 9,
                                   capabilities: Self.takesPart, identityKey: Self.key(4))
            guard case let .error(downgrade) = answer else { Issue.record("an end-to-end invite joined a plain room: \(String(describing: answer))"); return }
            #expect(downgrade.code == .endToEndEncryptionRequired && downgrade.message.contains("without end-to-end encryption"))
        }

        @Test func sealedKeysGoOnlyToTheMemberTheyNameSayingWhoSentThemAndAFloodIsCut() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let members = try ["ada", "bob", "cy"].enumerated().map { index, name in
                try fixture.member(name, room: "mail", capabilities: Self.takesPart, identityKey: Self.key(UInt8(index)), endToEnd: true)
            }
            for member in members { #expect(member.waitForRoster(["ada", "bob", "cy"])) }
            let (ada, bob, cy) = (members[0], members[1], members[2])
            // Ada claims to be someone else; the relay says who sent it.
            let sequence = ada.takeSequence()
            ada.send(ControlMessage(sequence: sequence, isReliable: true, body: .mediaKeys(.init(sender: 12_345, entries: [
                .init(ssrc: bob.ssrc, package: [1, 2, 3]), .init(ssrc: 0xDEAD, package: [4]),
            ]))))
            #expect(ada.pump(timeout: 1) { $0.controlInbox.contains { $0.body == .ack(.init(sequence: sequence)) } })
            #expect(bob.pump(timeout: 1) { !Self.keys($0).isEmpty })
            #expect(Self.keys(bob) == [ControlMessage.MediaKeys(entries: [.init(ssrc: ada.ssrc, package: [1, 2, 3])])],
                    "each entry names its sender, whatever the sender claimed")
            cy.drain(quiet: 0.3)
            #expect(Self.keys(cy).isEmpty, "cy was not named")

            // A retransmission (the ack was lost) is acknowledged again and not delivered twice.
            bob.controlInbox.removeAll()
            ada.send(ControlMessage(sequence: sequence, isReliable: true, body: .mediaKeys(.init(entries: [.init(ssrc: bob.ssrc, package: [1, 2, 3])]))))
            bob.drain(quiet: 0.3)
            #expect(Self.keys(bob).isEmpty)

            // Far more entries than any rotation sends: the relay passes its budget's worth, not the flood.
            cy.controlInbox.removeAll()
            for _ in 0..<400 {
                ada.send(ControlMessage(sequence: ada.takeSequence(), isReliable: true,
                                        body: .mediaKeys(.init(entries: Array(repeating: .init(ssrc: cy.ssrc, package: [9]), count: 8)))))
            }
            cy.drain(quiet: 1)
            // Counted once each, however often the relay sent a message again.
            var seen = Set<UInt32>()
            let delivered = cy.controlInbox.reduce(0) { total, message in
                guard case let .mediaKeys(keys) = message.body, seen.insert(message.sequence).inserted else { return total }
                return total + keys.entries.count
            }
            print("a flood of 3,200 sealed keys delivered \(delivered)")
            #expect(delivered <= MemberLeg.mediaKeyBurst + MemberLeg.mediaKeysPerSecond * 2)
            #expect(Set(cy.controlInbox.compactMap { message -> UInt32? in
                if case .mediaKeys = message.body { return message.sequence }
                return nil
            }).count <= delivered / 4, "gathered into few messages, not one per entry")
        }

        /// A browser member in an end-to-end encrypted room: a page that cannot take part (it
        /// sent no identity key) is refused with a reason it can show; one that can is admitted
        /// with its key in everyone's roster, and its sealed keys and a `parley` member's reach
        /// each other through the relay's mailbox, each entry naming its sender, as between two
        /// `parley` members. What the page sends is held to a member's limits.
        @Test func aBrowserTakesPartItsKeysRoutedBothWaysAndHostileKeysAreRefused() throws {
            let fixture = try RelayFixture.start { $0.acceptsBrowsers = true }
            defer { fixture.stop() }
            let token = fixture.token(room: "sealed", identity: "ada", endToEnd: true)
            let offer = StandInBrowser.offer(fingerprint: try DTLSContext().fingerprint)
            guard case let .failure(cannot) = fixture.relay.acceptBrowserOffer(offer, token: token, candidateHost: "127.0.0.1") else {
                Issue.record("a page without an identity key was answered for an end-to-end encrypted room")
                return
            }
            #expect(cannot.status == 403 && cannot.message.contains("RTCRtpScriptTransform"), "\(cannot.message)")
            guard case let .failure(short) = fixture.relay.acceptBrowserOffer(offer, token: token, candidateHost: "127.0.0.1", identityKey: [1, 2, 3]) else {
                Issue.record("a 3-byte identity key was taken")
                return
            }
            #expect(short.status == 400)
            #expect(fixture.relay.browserEdge?.offers.count == 0, "a refused offer left state behind")

            let bob = try fixture.member("bob", room: "sealed", capabilities: Self.takesPart, identityKey: Self.key(2), endToEnd: true)
            let ada = try StandInBrowser.connect(to: fixture.relay, port: fixture.port, token: token, identityKey: Self.key(1))
            #expect(bob.waitForRoster(["ada", "bob"]))
            let adaInRoster = bob.latestRoster?.first { $0.identity == "ada" }
            #expect(adaInRoster?.identityKey == Self.key(1), "the roster does not carry the page's identity key")
            #expect(adaInRoster?.capabilities.contains(.endToEndEncryption) == true)
            #expect(waitFor(2) { ada.page.events(after: 0).events.contains { $0.kind == "joined" && $0.e2ee == true } },
                    "the page was not told its room is end-to-end encrypted")
            #expect(waitFor(2) {
                let roster = ada.page.events(after: 0).events.last { $0.kind == "roster" }?.roster
                return roster?.first { $0.identity == "bob" }.map { $0.identityKey == Base64URL.encode(Self.key(2)) && $0.e2ee == true } == true
            }, "the page's roster does not carry bob's identity key")

            // The page's keys to bob, named as the page's; bob's to the page, named as bob's.
            #expect(ada.page.sendMediaKeys([(bob.ssrc, Base64URL.encode([1, 2, 3]))]) == .sent)
            #expect(bob.pump(timeout: 2) { !Self.keys($0).isEmpty })
            #expect(Self.keys(bob) == [ControlMessage.MediaKeys(entries: [.init(ssrc: 1111, package: [1, 2, 3])])])
            bob.send(ControlMessage(sequence: bob.takeSequence(), isReliable: true, body: .mediaKeys(.init(entries: [.init(ssrc: 1111, package: [4, 5])]))))
            #expect(waitFor(2) {
                ada.page.events(after: 0).events.contains { $0.kind == "mediaKeys" && $0.keys == [.init(ssrc: bob.ssrc, package: Base64URL.encode([4, 5]))] }
            }, "the page never got bob's sealed key")

            // What a `parley` member's message could not carry is refused from the page, with a reason.
            let hostile: [([(ssrc: UInt32, package: String)], String)] = [
                ([], "no entries"),
                (Array(repeating: (bob.ssrc, "AQ"), count: BrowserMember.maximumMediaKeysPerRequest + 1), "too many entries"),
                ([(bob.ssrc, Base64URL.encode(Array(repeating: 7, count: ControlMessage.MediaKeys.maximumPackageSize + 1)))], "a package over 256 bytes"),
                ([(bob.ssrc, "not base64url!")], "not base64url"),
                ([(bob.ssrc, "")], "an empty package"),
                ([(bob.ssrc, String(repeating: "A", count: 100_000))], "a 100,000-character package"),
            ]
            bob.controlInbox.removeAll()
            for (entries, what) in hostile {
                guard case let .refused(reason) = ada.page.sendMediaKeys(entries) else {
                    Issue.record("\(what) from the page was sent on")
                    continue
                }
                #expect(!reason.isEmpty)
            }
            bob.drain(quiet: 0.3)
            #expect(Self.keys(bob).isEmpty, "a refused request reached bob")

            // A flood within the request limit: the member's key budget cuts it as for a `parley` member.
            for _ in 0..<100 {
                _ = ada.page.sendMediaKeys(Array(repeating: (bob.ssrc, "CQ"), count: BrowserMember.maximumMediaKeysPerRequest))
            }
            bob.drain(quiet: 1)
            var seen = Set<UInt32>()
            let delivered = bob.controlInbox.reduce(0) { total, message in
                guard case let .mediaKeys(keys) = message.body, seen.insert(message.sequence).inserted else { return total }
                return total + keys.entries.count
            }
            print("a page's flood of 3,200 sealed keys delivered \(delivered)")
            #expect(delivered <= MemberLeg.mediaKeyBurst + MemberLeg.mediaKeysPerSecond * 2)
        }

        /// A page that sent an identity key into a plain room takes no part: its key is in no
        /// roster, and it may send no sealed keys.
        @Test func aBrowserWithAKeyInAPlainRoomSendsNoKeys() throws {
            let fixture = try RelayFixture.start { $0.acceptsBrowsers = true }
            defer { fixture.stop() }
            let bob = try fixture.member("bob", room: "plain", capabilities: Self.takesPart, identityKey: Self.key(2))
            let ada = try StandInBrowser.connect(to: fixture.relay, port: fixture.port, token: fixture.token(room: "plain", identity: "ada"),
                                                 identityKey: Self.key(1))
            #expect(bob.waitForRoster(["ada", "bob"]))
            #expect(bob.latestRoster?.allSatisfy { $0.identityKey.isEmpty } == true)
            #expect(waitFor(2) { ada.page.events(after: 0).events.contains { $0.kind == "joined" && $0.e2ee == false } })
            _ = ada.page.sendMediaKeys([(bob.ssrc, "AQ")])
            bob.drain(quiet: 0.3)
            #expect(Self.keys(bob).isEmpty)
        }

        @Test func aPlainRoomTakesNoSealedKeys() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let ada = try fixture.member("ada", room: "plain", capabilities: Self.takesPart, identityKey: Self.key(1))
            let bob = try fixture.member("bob", room: "plain", capabilities: Self.takesPart, identityKey: Self.key(2))
            #expect(bob.waitForRoster(["ada", "bob"]))
            #expect(bob.latestRoster?.allSatisfy { $0.identityKey.isEmpty } == true, "a plain room keeps no identity keys")
            ada.send(ControlMessage(sequence: ada.takeSequence(), isReliable: true, body: .mediaKeys(.init(entries: [.init(ssrc: bob.ssrc, package: [1])]))))
            bob.drain(quiet: 0.3)
            #expect(Self.keys(bob).isEmpty)
        }
    }
}
