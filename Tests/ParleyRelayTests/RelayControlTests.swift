import ParleyRelay
import ParleyRelayTestSupport
import ParleyWire
import Testing

/// The control protocol a client relies on, over real UDP: joining and its refusals, the
/// roster on every change, keepalive, leaving, idle removal, replacement, and shutdown.
extension RelayOverUDP {
    @Suite("The relay's control protocol")
    struct RelayControlTests {
        @Test("every token failure gets its own error code and a message a person understands")
        func everyTokenFailureHasItsOwnError() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let now = unixNow()
            let other = TokenSecret.random()
            let cases: [(String, String, String, ControlMessage.ErrorCode)] = [
                ("malformed", "room", "not.a-token", .tokenMalformed),
                ("bad signature", "room", AccessToken(identity: "ada", room: "room", issuedAt: now, expiresAt: now + 60).signed(with: other), .tokenSignatureInvalid),
                ("expired", "room", AccessToken(identity: "ada", room: "room", issuedAt: now - 7200, expiresAt: now - 3600).signed(with: fixture.secret), .tokenExpired),
                ("not yet valid", "room", AccessToken(identity: "ada", room: "room", issuedAt: now, expiresAt: now + 7200, notBefore: now + 3600).signed(with: fixture.secret), .tokenNotYetValid),
                ("wrong room", "other-room", fixture.token(room: "room", identity: "ada"), .tokenWrongRoom),
                ("bad identity", "room", AccessToken(identity: "   ", room: "room", issuedAt: now, expiresAt: now + 60).signed(with: fixture.secret), .tokenIdentityInvalid),
            ]
            for (name, room, token, code) in cases {
                let client = TestClient(relayPort: fixture.port)
                let answer = client.join(room: room, token: token, ssrc: 1, timeout: 2)
                guard case let .error(error) = answer else {
                    Issue.record("\(name): expected error \(code), got \(String(describing: answer))")
                    continue
                }
                print("\(name): \(error.code) — \(error.message)")
                #expect(error.code == code, "\(name)")
                #expect(!error.message.isEmpty)
            }
            let metrics = try fixture.relay.metricsText()
            #expect(metricValue(metrics, #"parley_relay_joins_total{result="token_expired"}"#) == 1)
        }

        @Test func aRetransmittedJoinGetsTheSameAnswerAndCookie() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let client = TestClient(relayPort: fixture.port)
            let token = fixture.token(room: "r", identity: "ada")
            guard case let .joined(first)? = client.join(room: "r", token: token, ssrc: 5) else { Issue.record("no joined"); return }
            guard case let .joined(second)? = client.join(room: "r", token: token, ssrc: 5) else { Issue.record("no joined"); return }
            #expect(first == second)
            #expect(first.keepaliveIntervalMilliseconds == 5_000 && first.idleTimeoutMilliseconds == 30_000)
        }

        @Test func aJoinersAnswerIsNeverLargerThanItsJoin() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let client = TestClient(relayPort: fixture.port)
            // An unpadded join (a reflection attempt) gets no answer at all.
            let join = ControlMessage(body: .join(.init(ssrc: 1, room: "r", token: "x", software: "")))
            var bytes = try join.serialized()
            bytes.removeLast(bytes.count - 40)
            client.send(bytes)
            #expect(client.receiveRaw(timeout: 0.3) == nil)
            // A stranger's 14-byte RTP-looking packet gets an error of at most 14 bytes.
            client.send([0x80, 111, 0, 1, 0, 0, 0, 1, 0, 0, 0, 9, 1, 2])
            let reply = try #require(client.receiveRaw(timeout: 1))
            print("14-byte packet from a stranger answered with \(reply.count) bytes")
            #expect(reply.count <= 14)
            #expect(try ControlMessage(parsing: reply).body.type == .error)
        }

        @Test func roomFullAndSSRCInUseAreRefused() throws {
            let fixture = try RelayFixture.start { $0.limits.maximumMembersPerRoom = 2 }
            defer { fixture.relay.shutdown() }
            let first = try fixture.member("ada", room: "r")
            let clash = TestClient(relayPort: fixture.port)
            let answer = clash.join(room: "r", token: fixture.token(room: "r", identity: "bob"), ssrc: first.ssrc)
            guard case let .error(error)? = answer else { Issue.record("expected ssrcInUse"); return }
            #expect(error.code == .ssrcInUse)
            _ = try fixture.member("bob", room: "r")
            let third = TestClient(relayPort: fixture.port)
            guard case let .error(full)? = third.join(room: "r", token: fixture.token(room: "r", identity: "cy"), ssrc: 99) else {
                Issue.record("expected roomFull"); return
            }
            #expect(full.code == .roomFull)
        }

        @Test func pingIsAnsweredWithTheSameTimestamp() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let client = try fixture.member("ada", room: "r")
            client.send(ControlMessage(sequence: 9, body: .ping(.init(timestamp: 0xDEAD_BEEF))))
            #expect(client.pump(timeout: 2) { $0.controlInbox.contains { $0.body == .pong(.init(timestamp: 0xDEAD_BEEF)) } })
        }

        @Test func leaveIsAcknowledgedAndTheOthersGetTheNewRosterAtOnce() throws {
            let fixture = try RelayFixture.start(threads: 2)
            defer { fixture.relay.shutdown() }
            let members = try fixture.room("r", size: 3)
            let leave = ControlMessage(sequence: 42, isReliable: true, body: .leave(.init()))
            let started = now()
            members[2].send(leave)
            #expect(members[2].pump(timeout: 2) { $0.controlInbox.contains { $0.body == .ack(.init(sequence: 42)) } })
            #expect(members[0].waitForRoster(["member-0", "member-1"]))
            print("roster without the leaver reached the others \(Int((now() - started) * 1000)) ms after leave")
            // A retransmitted leave whose ack was lost is acknowledged again.
            members[2].controlInbox.removeAll()
            members[2].send(leave)
            #expect(members[2].pump(timeout: 2) { $0.controlInbox.contains { $0.body == .ack(.init(sequence: 42)) } })
            #expect(fixture.relay.rooms["r"]?.sorted() == ["member-0", "member-1"])
        }

        @Test func aSilentMemberIsRemovedAfterTheIdleTimeoutAndTheOthersAreTold() throws {
            let fixture = try RelayFixture.start {
                $0.limits.keepaliveIntervalMilliseconds = 200
                $0.limits.idleTimeoutMilliseconds = 800
            }
            defer { fixture.relay.shutdown() }
            let members = try fixture.room("r", size: 3)
            let started = now()
            // Two keep pinging; member-2 goes silent (but keeps reading, to see its goodbye).
            var goneAt: Double?
            while now() - started < 3 {
                for client in members.prefix(2) { client.send(ControlMessage(body: .ping(.init(timestamp: 1)))) }
                members[0].pump(timeout: 0.1)
                members[2].pump(timeout: 0.05)
                if goneAt == nil, members[0].latestRoster.map({ Set($0.map(\.identity)) }) == ["member-0", "member-1"] { goneAt = now() }
                if goneAt != nil && !members[2].goodbyes.isEmpty { break }
            }
            let elapsed = (goneAt ?? .infinity) - started
            print("silent member removed after \(Int(elapsed * 1000)) ms (idle timeout 800 ms)")
            #expect(elapsed >= 0.8 && elapsed < 2.0)
            #expect(members[2].goodbyes.first?.reason == .idleTimeout)
            #expect(members[1].waitForRoster(["member-0", "member-1"]))
        }

        @Test func aJoinWithTheSameIdentityReplacesTheOldSession() throws {
            let fixture = try RelayFixture.start(threads: 2)
            defer { fixture.relay.shutdown() }
            let old = try fixture.member("ada", room: "r")
            let bob = try fixture.member("bob", room: "r")
            let new = try fixture.member("ada", room: "r")
            #expect(old.pump(timeout: 2) { !$0.goodbyes.isEmpty })
            #expect(old.goodbyes.first?.reason == .replaced)
            // Bob's roster names ada with the new session's SSRC.
            #expect(bob.pump(timeout: 2) { client in
                client.latestRoster.map { roster in roster.count == 2 && roster.contains { $0.identity == "ada" && $0.ssrc == new.ssrc } } ?? false
            })
            new.sendRTP(sequence: 1)
            old.sendRTP(sequence: 1)
            #expect(bob.pump(timeout: 2) { !$0.mediaInbox.isEmpty })
            bob.drain(quiet: 0.2)
            #expect(bob.mediaInbox.compactMap { origin(ofMedia: $0)?.ssrc } == [new.ssrc])
        }

        @Test func shutdownTellsEveryMemberGoodbyeMoreThanOnceUntilAcknowledged() throws {
            let fixture = try RelayFixture.start(threads: 2) { $0.shutdownGraceMilliseconds = 1000 }
            let members = try fixture.room("r", size: 4)
            members[0].autoAck = false  // this one never acks: it must hear goodbye repeatedly
            let started = now()
            fixture.relay.shutdown()
            let took = now() - started
            print("shutdown took \(Int(took * 1000)) ms with one member never acknowledging")
            #expect(took < 2.0)
            for client in members { client.drain(quiet: 0.05) }
            #expect(members.allSatisfy { $0.goodbyes.contains { $0.reason == .relayShuttingDown } })
            #expect(members[0].goodbyes.count >= 2, "the unacknowledged goodbye was sent \(members[0].goodbyes.count) time(s)")
        }
    }
}
