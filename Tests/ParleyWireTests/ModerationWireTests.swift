import Testing
@testable import ParleyWire

/// The room-control messages on the wire: what a moderator's client sends and the relay
/// answers, the server-mute flag in the roster, and the goodbyes and refusal a removed member
/// reads. Each parser survives any bytes, like every other (``ParserPropertyTests``).
@Suite("Moderation messages on the wire")
struct ModerationWireTests {
    static let examples: [ControlMessage] = [
        ControlMessage(sequence: 7, body: .moderate(.init(action: .kick, target: "bob", banSeconds: 600, reason: "shouting over everyone"))),
        ControlMessage(sequence: 8, body: .moderate(.init(action: .serverMute, target: "Zoë"))),
        ControlMessage(sequence: 9, body: .moderate(.init(action: .closeRoom, reason: "the meeting is over"))),
        ControlMessage(sequence: 7, body: .moderationReply(.init(outcome: .done, message: "bob removed from standup"))),
        ControlMessage(sequence: 8, body: .moderationReply(.init(outcome: .notModerator, message: "your token does not make you a moderator"))),
        ControlMessage(sequence: 3, isReliable: true, body: .goodbye(.init(reason: .kicked, message: "ada removed you from standup: spam."))),
        ControlMessage(sequence: 4, isReliable: true, body: .goodbye(.init(reason: .roomClosed, message: "ada closed standup."))),
        ControlMessage(body: .error(.init(code: .kickedFromRoom, message: "ada removed you from standup; you can rejoin in 4 min"))),
        ControlMessage(sequence: 5, isReliable: true, body: .roster(.init(version: 2, members: [
            .init(ssrc: 1, identity: "ada", canPublish: true, capabilities: .redundantAudio),
            .init(ssrc: 2, identity: "bob", canPublish: true, capabilities: .redundantAudio, isServerMuted: true),
        ]))),
        // Passed on to another relay of the room over a trunk: who asked travels with it.
        ControlMessage(sequence: 10, isReliable: true, body: .moderate(.init(action: .kick, target: "bob", banSeconds: 60, moderator: "ada"))),
    ]

    @Test func everyMessageReadsBackAsWritten() throws {
        for message in Self.examples {
            #expect(try ControlMessage(parsing: message.serialized()) == message)
            #expect(try message.serialized().count == message.serializedSize)
        }
    }

    /// A client's request has no moderator name; the relay's copy for a trunk appends one, and
    /// a request written without it (by a client, or an older relay) reads with none.
    @Test func theModeratorsNameIsATrailingFieldOnlyATrunkCarries() throws {
        let plain = try ControlMessage(sequence: 1, body: .moderate(.init(action: .serverMute, target: "bob"))).serialized()
        let named = try ControlMessage(sequence: 1, body: .moderate(.init(action: .serverMute, target: "bob", moderator: "ada"))).serialized()
        #expect(named.count == plain.count + 1 + 3)
        guard case let .moderate(request) = try ControlMessage(parsing: plain).body else { Issue.record("not a request"); return }
        #expect(request.moderator.isEmpty)
    }

    @Test func theServerMuteTravelsInTheRosterWithoutTouchingTheCapabilities() throws {
        let roster = ControlMessage(body: .roster(.init(version: 1, members: [
            .init(ssrc: 2, identity: "bob", canPublish: false, capabilities: .redundantAudio, isServerMuted: true),
        ])))
        let bytes = try roster.serialized()
        // The member's flags byte: bit 0 may publish, bits 1–6 capabilities, bit 7 server-muted.
        #expect(bytes[ControlMessage.headerSize + 7 + 4] == 0x80 | 0x02)
        guard case let .roster(parsed) = try ControlMessage(parsing: bytes).body else { Issue.record("not a roster"); return }
        #expect(parsed.members[0].isServerMuted && parsed.members[0].capabilities == .redundantAudio && !parsed.members[0].canPublish)
    }

    @Test func actionsOutcomesAndReasonsFromNewerPeersReadAsUnknown() throws {
        var request = try Self.examples[0].serialized()
        request[ControlMessage.headerSize] = 0x77
        guard case let .moderate(parsed) = try ControlMessage(parsing: request).body else { Issue.record("not a request"); return }
        #expect(parsed.action == .unknown && parsed.target == "bob")
        var reply = try Self.examples[3].serialized()
        reply[ControlMessage.headerSize] = 0x42
        guard case let .moderationReply(answer) = try ControlMessage(parsing: reply).body else { Issue.record("not a reply"); return }
        #expect(answer.outcome == .unknown)
        var goodbye = try Self.examples[5].serialized()
        goodbye[ControlMessage.headerSize] = 0x33
        guard case let .goodbye(farewell) = try ControlMessage(parsing: goodbye).body else { Issue.record("not a goodbye"); return }
        #expect(farewell.reason == .unknown)
    }

    @Test func theParsersNeverTrapAndWhatTheyAcceptRoundTrips() throws {
        let examples = try Self.examples.map { try $0.serialized() }
        var accepted = 0
        for input in ParserPropertyTests.inputs(seed: 0x4D4F_4445, validExamples: examples, plausibleFirstBytes: [0x50]) {
            guard let message = try? ControlMessage(parsing: input) else { continue }
            accepted += 1
            #expect(try ControlMessage(parsing: message.serialized()) == message, "input \(input)")
        }
        #expect(accepted > 1_000)
    }
}
