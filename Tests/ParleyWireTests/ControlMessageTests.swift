import Testing
@testable import ParleyWire
import func ParleyRelayTestSupport.bytes

@Suite("Parley control messages")
struct ControlMessageTests {
    static let examples: [ControlMessage] = [
        ControlMessage(sequence: 1, body: .join(.init(ssrc: 0xDEAD_BEEF, room: "standup", token: "abc.def.ghi", software: "parley/0.1.0"))),
        ControlMessage(sequence: 1, body: .join(.init(ssrc: 7, room: "r", token: "t", software: "s", capabilities: .redundantAudio))),
        ControlMessage(sequence: 2, body: .joined(.init(
            cookie: 0x0123_4567_89AB_CDEF, ssrc: 0xDEAD_BEEF, identity: "Zoë", room: "standup", canPublish: true,
            keepaliveIntervalMilliseconds: 5_000, idleTimeoutMilliseconds: 30_000
        ))),
        ControlMessage(sequence: 3, body: .ready(.init(cookie: 42))),
        ControlMessage(sequence: 4, isReliable: true, body: .roster(.init(version: 9, members: [
            .init(ssrc: 1, identity: "alice", canPublish: true),
            .init(ssrc: 2, identity: "bob", canPublish: false),
            .init(ssrc: 3, identity: "cy", canPublish: true, capabilities: .redundantAudio),
        ]))),
        ControlMessage(sequence: 5, isReliable: true, body: .leave(.init())),
        ControlMessage(sequence: 0, body: .ping(.init(timestamp: 123_456_789))),
        ControlMessage(sequence: 0, body: .pong(.init(timestamp: 123_456_789))),
        ControlMessage(sequence: 0, body: .ack(.init(sequence: 4))),
        ControlMessage(sequence: 0, body: .error(.init(code: .tokenExpired, message: "token expired at 12:00 UTC"))),
        ControlMessage(sequence: 0, body: .error(.init(code: .notJoined, message: "join again", echo: Array(0..<16)))),
        ControlMessage(sequence: 6, isReliable: true, body: .goodbye(.init(reason: .relayShuttingDown, message: "relay restarting"))),
        ControlMessage(sequence: 7, body: .redirect(.init(
            room: "standup", relay: .init(address: "198.51.100.7:7800", publicKey: Array(0..<32)),
            others: [.init(address: "[2001:db8::1]:7800", publicKey: Array(32..<64)), .init(address: "10.0.0.3:7800", publicKey: [])]))),
        ControlMessage(sequence: 8, body: .joined(.init(
            cookie: 9, ssrc: 10, identity: "ada", room: "standup", canPublish: true, keepaliveIntervalMilliseconds: 5_000,
            idleTimeoutMilliseconds: 30_000, clusterRelays: [.init(address: "10.0.0.2:7800", publicKey: Array(repeating: 7, count: 32))]))),
        ControlMessage(sequence: 7, isReliable: true, body: .roster(.init(version: 10, members: [
            .init(ssrc: 1, identity: "alice", canPublish: true, capabilities: .supported, state: .muted),
            .init(ssrc: 2, identity: "bob", canPublish: true, state: [.muted, .deafened]),
        ]))),
        ControlMessage(sequence: 8, isReliable: true, body: .memberState(.init(revision: 3, state: [.muted, .deafened]))),
        ControlMessage(sequence: 9, isReliable: true, body: .text(.init(number: 1, text: "back in five — ça va? 👋"))),
        ControlMessage(sequence: 10, isReliable: true, body: .text(.init(number: 0xFFFF_FFFF, sender: "Zoë", text: String(repeating: "x", count: 500)))),
    ]

    @Test(arguments: examples)
    func everyMessageRoundTrips(_ message: ControlMessage) throws {
        let bytes = try message.serialized()
        #expect(bytes.count == message.serializedSize)
        #expect(try ControlMessage(parsing: bytes) == message)
        bytes.withUnsafeBytes { #expect(PacketKind($0) == .control) }
    }

    /// A joined from a relay of a cluster lists four others and still fits in the smallest
    /// join, which it answers; a joined from a relay on its own is byte for byte as before.
    @Test func aJoinedListingClusterRelaysStillFitsTheJoinItAnswers() throws {
        let relay = ControlMessage.ClusterRelay(address: "[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]:65535", publicKey: Array(repeating: 1, count: 32))
        let joined = ControlMessage(body: .joined(.init(
            cookie: 1, ssrc: 1, identity: String(repeating: "x", count: 64), room: String(repeating: "r", count: 64),
            canPublish: true, keepaliveIntervalMilliseconds: 1, idleTimeoutMilliseconds: 1, clusterRelays: Array(repeating: relay, count: 4))))
        #expect(joined.serializedSize < ControlMessage.minimumJoinSize)
        let alone = ControlMessage(body: .joined(.init(cookie: 1, ssrc: 1, identity: "a", room: "r", canPublish: true, keepaliveIntervalMilliseconds: 1, idleTimeoutMilliseconds: 1)))
        #expect(try alone.serialized().count == 8 + 8 + 4 + 2 + 2 + 1 + 4 + 4)
    }

    @Test func aRedirectWithABadKeyLengthOrTooManyRelaysIsRefused() throws {
        var bytes = try ControlMessage(body: .redirect(.init(room: "r", relay: .init(address: "a:1", publicKey: Array(0..<32))))).serialized()
        bytes[8 + 2 + 4] = 31  // the key's length byte
        #expect(throws: WireError.self) { try ControlMessage(parsing: bytes) }
        let many = ControlMessage(body: .redirect(.init(room: "r", relay: .init(address: "a:1", publicKey: []),
                                                        others: Array(repeating: .init(address: "b:1", publicKey: []), count: 9))))
        #expect(throws: WireError.self) { try many.serialized() }
    }

    @Test func pingMatchesTheLayoutByteForByte() throws {
        let serialized = try ControlMessage(sequence: 0x0102_0304, isReliable: true, body: .ping(.init(timestamp: 0x1122_3344_5566_7788))).serialized()
        #expect(serialized == bytes(fromHex: "50 01 06 01 01020304 1122334455667788"))
    }

    @Test func joinsArePaddedSoTheRelayNeverAnswersWithMoreBytes() throws {
        let join = ControlMessage(body: .join(.init(ssrc: 1, room: "r", token: "t", software: "s")))
        #expect(try join.serialized().count == ControlMessage.minimumJoinSize)
        let joined = ControlMessage(body: .joined(.init(
            cookie: 1, ssrc: 1, identity: String(repeating: "x", count: 64), room: String(repeating: "r", count: 64),
            canPublish: true, keepaliveIntervalMilliseconds: 1, idleTimeoutMilliseconds: 1
        )))
        let error = ControlMessage(body: .error(.init(code: .roomFull, message: String(repeating: "e", count: 255))))
        #expect(joined.serializedSize < ControlMessage.minimumJoinSize)
        #expect(error.serializedSize < ControlMessage.minimumJoinSize)
    }

    /// An older client padded its join with zeros right after the software name, and read
    /// only bit 0 of a roster member's flags: capabilities live exactly there, so old and
    /// new clients and relays read each other, and an old one never seems to offer more.
    @Test func capabilitiesSitWhereOlderPeersHadPaddingAndIgnoredBits() throws {
        let newJoin = try ControlMessage(body: .join(.init(ssrc: 1, room: "r", token: "t", software: "s", capabilities: .redundantAudio))).serialized()
        // header, ssrc, "r", "t", "s", then the capability byte where an old client put a zero
        #expect(Array(newJoin[8..<20]) == bytes(fromHex: "00000001 0172 000174 0173 01"))
        var oldJoin = newJoin
        oldJoin[19] = 0
        guard case let .join(old) = try ControlMessage(parsing: oldJoin).body else { Issue.record("not a join"); return }
        #expect(old.capabilities.isEmpty && old.software == "s")

        let roster = try ControlMessage(body: .roster(.init(version: 1, members: [
            .init(ssrc: 5, identity: "a", canPublish: false, capabilities: .redundantAudio),
            .init(ssrc: 6, identity: "b", canPublish: true, capabilities: .redundantAudio),
        ]))).serialized()
        // version, page, pages, count, then per member: ssrc, flags, name; then the state block
        // and the key block
        #expect(Array(roster[8...]) == bytes(fromHex: "00000001 00 01 02 00000005 02 0161 00000006 03 0162 0000 0000"))
        #expect(roster[19] & 0x01 == 0 && roster[26] & 0x01 == 1, "bit 0, all an older client reads, is still publish")
    }

    /// Identity keys (end-to-end encryption) ride behind the states: in a join after the
    /// capabilities, in a roster as a last block an older client never reads, and a roster
    /// from a relay before them reads as nobody having a key.
    @Test func identityKeysFollowEverythingOlderPeersRead() throws {
        let key = Array(UInt8(1)...UInt8(32))
        let join = try ControlMessage(body: .join(.init(ssrc: 1, room: "r", token: "t", software: "s", capabilities: .endToEndEncryption,
                                                        identityKey: key))).serialized()
        #expect(join.count == ControlMessage.minimumJoinSize)
        #expect(Array(join[19..<21]) == [0x04, 32] && Array(join[21..<53]) == key)
        guard case let .join(parsed) = try ControlMessage(parsing: join).body else { Issue.record("not a join"); return }
        #expect(parsed.identityKey == key && parsed.capabilities == .endToEndEncryption)
        var badLength = join
        badLength[20] = 31
        #expect(throws: WireError.self, "a key is 32 bytes or none") { try ControlMessage(parsing: badLength) }

        let members: [ControlMessage.Roster.Member] = [
            .init(ssrc: 5, identity: "a", canPublish: true, identityKey: key),
            .init(ssrc: 6, identity: "b", canPublish: true),
        ]
        let roster = try ControlMessage(body: .roster(.init(version: 1, members: members))).serialized()
        guard case let .roster(read) = try ControlMessage(parsing: roster).body else { Issue.record("not a roster"); return }
        #expect(read.members == members)
        guard case let .roster(old) = try ControlMessage(parsing: Array(roster.dropLast(34))).body else { Issue.record("not a roster"); return }
        #expect(old.members.map(\.identityKey.isEmpty) == [true, true], "a roster from a relay before keys")
        let pages = ControlMessage.Roster.pages(version: 1, members: Array(repeating: members[0], count: 40), maximumMessageSize: 1200)
        for page in pages { #expect(try ControlMessage(body: .roster(page)).serialized().count <= 1200, "pages count the keys") }

        let joined = try ControlMessage(body: .joined(.init(cookie: 1, ssrc: 1, identity: "a", room: "r", canPublish: true,
                                                            isEndToEndEncrypted: true, keepaliveIntervalMilliseconds: 1,
                                                            idleTimeoutMilliseconds: 1))).serialized()
        guard case let .joined(confirmed) = try ControlMessage(parsing: joined).body else { Issue.record("not joined"); return }
        #expect(confirmed.isEndToEndEncrypted && confirmed.canPublish)
    }

    @Test func mediaKeysRoundTripAndRefuseWhatNoSenderMakes() throws {
        let keys = ControlMessage.MediaKeys(sender: 7, entries: [.init(ssrc: 1, package: [1, 2, 3]), .init(ssrc: 2, package: Array(repeating: 9, count: 120))])
        let bytes = try ControlMessage(sequence: 4, isReliable: true, body: .mediaKeys(keys)).serialized()
        #expect(bytes.count == ControlMessage(body: .mediaKeys(keys)).serializedSize)
        guard case let .mediaKeys(read) = try ControlMessage(parsing: bytes).body else { Issue.record("not media keys"); return }
        #expect(read == keys)
        #expect(throws: WireError.self, "a package over 256 bytes") {
            try ControlMessage(body: .mediaKeys(.init(entries: [.init(ssrc: 1, package: Array(repeating: 0, count: 257))]))).serialized()
        }
        #expect(throws: WireError.self, "more entries than a message carries") {
            try ControlMessage(body: .mediaKeys(.init(entries: Array(repeating: .init(ssrc: 1, package: []), count: 9)))).serialized()
        }
    }

    /// Members' states ride behind the members, where an older client stops reading; a roster
    /// from an older relay has none, and reads as nobody muted.
    @Test func memberStatesFollowTheMembersWhereOlderPeersStopReading() throws {
        let members: [ControlMessage.Roster.Member] = [
            .init(ssrc: 5, identity: "a", canPublish: true, state: .muted),
            .init(ssrc: 6, identity: "b", canPublish: true, state: [.muted, .deafened]),
        ]
        let serialized = try ControlMessage(body: .roster(.init(version: 1, members: members))).serialized()
        #expect(Array(serialized[8...]) == bytes(fromHex: "00000001 00 01 02 00000005 01 0161 00000006 01 0162 01 03 00 00"))
        guard case let .roster(old) = try ControlMessage(parsing: Array(serialized.dropLast(4))).body else { Issue.record("not a roster"); return }
        #expect(old.members.map(\.state) == [[], []], "an older relay's roster: states unknown, so empty")
        #expect(old.members.map(\.identity) == ["a", "b"])
        #expect(throws: WireError.self, "a state block shorter than the members is cut off") {
            try ControlMessage(parsing: Array(serialized.dropLast(3)))
        }
        #expect(ControlMessage.MemberState([.muted, .deafened]).summary == "deafened")
        #expect(ControlMessage.MemberState.muted.summary == "muted" && ControlMessage.MemberState().summary == "live")
    }

    @Test func aTextCarriesItsNumberSenderAndWordsAndItsRulesSayWhatIsWrong() throws {
        let serialized = try ControlMessage(sequence: 2, isReliable: true, body: .text(.init(number: 7, sender: "bo", text: "hi"))).serialized()
        #expect(serialized == bytes(fromHex: "50 01 31 01 00000002 00000007 02 626F 0002 6869"))
        #expect(ControlMessage.Text.problem(with: "back in 5") == nil)
        #expect(ControlMessage.Text.problem(with: String(repeating: "é", count: 250)) == nil, "500 bytes of UTF-8 is the most")
        #expect(ControlMessage.Text.problem(with: String(repeating: "é", count: 251))?.contains("502 bytes; the most is 500") == true)
        #expect(ControlMessage.Text.problem(with: "  ") == "the message is empty")
        #expect(ControlMessage.Text.problem(with: "red\u{1B}[31m")?.contains("U+001B") == true)
        #expect(ControlMessage.Text.problem(with: "two\nlines")?.contains("control character or line break (U+000A)") == true)
    }

    @Test func aLongTokenMakesTheJoinLongerThanTheMinimum() throws {
        let token = String(repeating: "t", count: 2_000)
        let join = ControlMessage(body: .join(.init(ssrc: 1, room: "r", token: token, software: "s")))
        let bytes = try join.serialized()
        #expect(bytes.count > 2_000)
        #expect(try ControlMessage(parsing: bytes) == join)
    }

    @Test func rosterPagesStayUnderTheSizeAndKeepEveryMember() throws {
        let members = (0..<40).map { ControlMessage.Roster.Member(ssrc: UInt32($0), identity: String(repeating: "n", count: 60), canPublish: true) }
        let pages = ControlMessage.Roster.pages(version: 3, members: members, maximumMessageSize: 512)
        #expect(pages.count > 1)
        for page in pages {
            #expect(ControlMessage(body: .roster(page)).serializedSize <= 512)
            #expect(page.pageCount == UInt8(pages.count))
        }
        #expect(pages.flatMap(\.members) == members)
    }

    @Test func unknownCodesAndReasonsAreKeptReadable() throws {
        let message = try ControlMessage(parsing: bytes(fromHex: "50 01 09 00 00000000 7777 02 6869"))
        #expect(message.body == .error(.init(code: .unknown, message: "hi")))
    }

    @Test func anErrorFromARelayThatEchoesNothingReadsAsBeforeAndAnEchoTooLongIsRefused() throws {
        #expect(try ControlMessage(parsing: bytes(fromHex: "50 01 09 00 00000000 0009 02 6869")).body == .error(.init(code: .notJoined, message: "hi")))
        #expect(try ControlMessage(parsing: bytes(fromHex: "50 01 09 00 00000000 0009 00 02 ABCD")).body
            == .error(.init(code: .notJoined, message: "", echo: [0xAB, 0xCD])))
        #expect(throws: WireError.self) { try ControlMessage(parsing: bytes(fromHex: "50 01 09 00 00000000 0009 00 21") + [UInt8](repeating: 0, count: 33)) }
        #expect(throws: WireError.self) { try ControlMessage(parsing: bytes(fromHex: "50 01 09 00 00000000 0009 00 04 ABCD")) }
    }

    @Test func malformedControlMessagesAreRejected() {
        #expect(throws: WireError.malformed(.controlMessage, reason: "unsupported control protocol version")) {
            try ControlMessage(parsing: bytes(fromHex: "50 02 06 00 00000000 0000000000000000"))
        }
        #expect(throws: WireError.malformed(.controlMessage, reason: "unknown control message type")) {
            try ControlMessage(parsing: bytes(fromHex: "50 01 EE 00 00000000"))
        }
        #expect(throws: WireError.malformed(.controlMessage, reason: "text is not valid UTF-8")) {
            try ControlMessage(parsing: bytes(fromHex: "50 01 09 00 00000000 0001 02 C328"))
        }
        #expect(throws: WireError.malformed(.controlMessage, reason: "roster page index is not below the page count")) {
            try ControlMessage(parsing: bytes(fromHex: "50 01 04 00 00000000 00000001 02 02 00"))
        }
    }
}

@Suite("Invite URLs")
struct InviteURLTests {
    @Test func aPrintedInviteParsesBackToTheSameInvite() throws {
        let invite = InviteURL(host: "relay.example.org", port: 7800, room: "team-standup", token: "eyJ.a+b/c=.sig", parameters: [("key", "abc_-")])
        let text = invite.description
        #expect(text == "parley://relay.example.org:7800/team-standup?token=eyJ.a%2Bb%2Fc%3D.sig&key=abc_-")
        #expect(try InviteURL(parsing: text) == invite)
    }

    @Test func ipv6HostsAreBracketed() throws {
        let invite = try InviteURL(parsing: "parley://[2001:db8::1]:9000/r?token=t")
        #expect(invite.host == "2001:db8::1")
        #expect(invite.port == 9000)
        #expect(invite.relayAddress == "[2001:db8::1]:9000")
        #expect(try InviteURL(parsing: invite.description) == invite)
    }

    @Test func thePortDefaults() throws {
        #expect(try InviteURL(parsing: "  PARLEY://127.0.0.1/room?token=x  ").port == InviteURL.defaultPort)
    }

    @Test(arguments: [
        ("https://x/r?token=t", "an invite starts with parley://"),
        ("parley://host", "the invite has no room (parley://host:port/ROOM?token=…)"),
        ("parley://host:0/r?token=t", "the port must be a number from 1 to 65535"),
        ("parley://host:99999/r?token=t", "the port must be a number from 1 to 65535"),
        ("parley://2001:db8::1/r?token=t", "put an IPv6 address in brackets: [2001:db8::1]:7800"),
        ("parley://host/r", "the invite has no token (…?token=…)"),
        ("parley://host/bad room?token=t", "the room name may use only letters, digits, '.', '_' and '-' (1 to 64)"),
        ("parley://host/r?token=%zz", "a query parameter has a bad %-escape"),
        ("parley://:80/r?token=t", "the invite has no relay host"),
    ])
    func badInvitesSayWhatToFix(text: String, reason: String) {
        #expect(throws: WireError.malformed(.inviteURL, reason: reason)) { try InviteURL(parsing: text) }
    }

    @Test func namesFollowTheSharedRules() {
        #expect(ParleyNames.problem(withRoom: "ok.room_1-a") == nil)
        #expect(ParleyNames.problem(withRoom: "") != nil)
        #expect(ParleyNames.problem(withRoom: "a/b") != nil)
        #expect(ParleyNames.problem(withRoom: String(repeating: "a", count: 65)) != nil)
        #expect(ParleyNames.problem(withIdentity: "Zoë Ångström") == nil)
        #expect(ParleyNames.problem(withIdentity: "   ") != nil)
        #expect(ParleyNames.problem(withIdentity: "bell\u{07}") != nil)
    }
}

@Suite("Demultiplexing one port (RFC 7983, RFC 5761)")
struct PacketKindTests {
    @Test func firstByteDecidesAndRTCPIsToldFromRTPByTheSecond() {
        #expect(PacketKind(firstByte: 0x80, secondByte: 111) == .rtp)
        #expect(PacketKind(firstByte: 0x80, secondByte: 0x80 | 111) == .rtp)  // marker set
        #expect(PacketKind(firstByte: 0x81, secondByte: 200) == .rtcp)
        #expect(PacketKind(firstByte: 0x81, secondByte: 205) == .rtcp)
        #expect(PacketKind(firstByte: 0x80, secondByte: 192) == .rtcp)
        #expect(PacketKind(firstByte: 0x80, secondByte: 223) == .rtcp)
        #expect(PacketKind(firstByte: 0x80, secondByte: 224) == .rtp)
        #expect(PacketKind(firstByte: 0x50, secondByte: 1) == .control)
        #expect(PacketKind(firstByte: 0x51, secondByte: 1) == .handshake)
        #expect(PacketKind(firstByte: 0x54, secondByte: 1) == .handshake)
        #expect(PacketKind(firstByte: 0x55, secondByte: 1) == .sealed)
        #expect(PacketKind(firstByte: 0x56, secondByte: 1) == .handshake)  // trunk init
        #expect(PacketKind(firstByte: 0x57, secondByte: 1) == .handshake)  // trunk response
        #expect(PacketKind(firstByte: 0x58, secondByte: 1) == .unknown)
        // RFC 7983's ranges for the browsers' STUN (0-3) and DTLS (20-63), and nothing between.
        #expect(PacketKind(firstByte: 0x00, secondByte: 1) == .stun)
        #expect(PacketKind(firstByte: 0x03, secondByte: 1) == .stun)
        #expect(PacketKind(firstByte: 0x04, secondByte: 1) == .unknown)
        #expect(PacketKind(firstByte: 0x13, secondByte: 1) == .unknown)
        #expect(PacketKind(firstByte: 0x14, secondByte: 1) == .dtls)
        #expect(PacketKind(firstByte: 0x16, secondByte: 1) == .dtls)
        #expect(PacketKind(firstByte: 0x3F, secondByte: 1) == .dtls)
        #expect(PacketKind(firstByte: 0x40, secondByte: 1) == .unknown)
        #expect(PacketKind(firstByte: 0x80, secondByte: nil) == .unknown)
        #expect(PacketKind(UnsafeRawBufferPointer(start: nil, count: 0)) == .unknown)
    }
}
