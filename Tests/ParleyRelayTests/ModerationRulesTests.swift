import ParleyBasics
import ParleyWire
import Testing
@testable import ParleyRelay

/// Room control as plain rules, with no socket and no clock: the ban list and its bounds,
/// a room's server-mutes, and the admin token (the admin API's requests and bodies are
/// `ParleyAdminTests`').
@Suite("Moderation rules")
struct ModerationRulesTests {
    static let second: UInt64 = 1_000_000_000

    @Test func aKickKeepsTheIdentityOutOfThatRoomOnlyAndOnlyForItsDuration() {
        var kicks = KickList()
        kicks.ban("bob", from: "standup", seconds: 300, by: "ada", reason: "spam", now: 10 * Self.second)
        #expect(kicks.ban(of: "bob", in: "standup", now: 11 * Self.second)?.by == "ada")
        #expect(kicks.ban(of: "bob", in: "other", now: 11 * Self.second) == nil)
        #expect(kicks.ban(of: "carol", in: "standup", now: 11 * Self.second) == nil)
        let ban = kicks.ban(of: "bob", in: "standup", now: 250 * Self.second)!
        #expect(ban.refusal(room: "standup", now: 250 * Self.second) == "ada removed you from standup: spam; you can rejoin in 60 s")
        #expect(kicks.ban(of: "bob", in: "standup", now: 310 * Self.second) == nil)
        #expect(kicks.count == 0, "an expired ban is forgotten")
    }

    @Test func theBanListIsBoundedAndKeepsTheNewestBans() {
        var kicks = KickList(capacity: 100)
        for index in 0..<1_000 {
            kicks.ban("member\(index)", from: "r", seconds: UInt32(60 + index), by: "ada", reason: "", now: 0)
        }
        #expect(kicks.count == 100)
        #expect(kicks.ban(of: "member999", in: "r", now: 1) != nil)
        #expect(kicks.ban(of: "member0", in: "r", now: 1) == nil, "the ban closest to running out made way")
    }

    @Test func aServerMuteOutlivesLeavingAndRejoiningAndShowsInTheRoster() {
        var room = Room(name: "r")
        _ = room.admit(Room.Member(sessionID: 1, identity: "bob", ssrc: 7, canPublish: true), maximumMembers: 5)
        room.activate(sessionID: 1)
        let before = room.version
        let muted = room.setServerMuted("bob", true)
        #expect(muted)
        #expect(room.version != before, "the roster changes")
        #expect(room.roster.first?.isServerMuted == true)
        room.remove(sessionID: 1)
        _ = room.admit(Room.Member(sessionID: 2, identity: "bob", ssrc: 8, canPublish: true), maximumMembers: 5)
        room.activate(sessionID: 2)
        #expect(room.roster.first?.isServerMuted == true, "rejoining does not lift it")
        let unmuted = room.setServerMuted("bob", false)
        #expect(unmuted && room.roster.first?.isServerMuted == false)
        let carol = room.setServerMuted("carol", true)
        #expect(!carol, "nobody called carol is here")
    }

    @Test func requestsAreCheckedBeforeAnyLock() {
        #expect(ModerationCheck.problem(with: .init(action: .kick, target: "bob", banSeconds: 600, reason: "spam")) == nil)
        #expect(ModerationCheck.problem(with: .init(action: .kick))?.contains("name the member") == true)
        #expect(ModerationCheck.problem(with: .init(action: .kick, target: "bob", banSeconds: 30 * 86_400))?.contains("at most 7 days") == true)
        #expect(ModerationCheck.problem(with: .init(action: .kick, target: "bob", reason: "a\u{202E}b"))?.contains("control") == true)
        #expect(ModerationCheck.problem(with: .init(action: .closeRoom, reason: String(repeating: "x", count: 161)))?.contains("160 bytes") == true)
        #expect(ModerationCheck.problem(with: .init(action: .unknown, target: "bob"))?.contains("update the relay") == true)
    }

    @Test func theAdminTokenMatchesOnlyItselfAndNeverShowsInADescription() throws {
        let token = AdminToken.random()
        #expect(token.text.count >= AdminToken.minimumLength)
        #expect(token.matches(token.text))
        #expect(!token.matches(String(token.text.dropLast())) && !token.matches(token.text + "x") && !token.matches(""))
        #expect("\(token)" == "AdminToken(redacted)")
        #expect(throws: ConfigurationError.self) { try AdminToken(text: "short") }
        #expect(throws: ConfigurationError.self) { try AdminToken(text: String(repeating: "a", count: 20) + " " + String(repeating: "b", count: 20)) }
    }

    @Test func aSecretFileWithoutAnAdminTokenStillLoadsAndANewOneHasIt() throws {
        let fresh = SecretFile.random()
        let reread = try SecretFile(parsing: fresh.text, source: "relay.secret")
        #expect(reread.adminToken?.matches(fresh.adminToken!.text) == true)
        var older = fresh
        older.adminToken = nil
        #expect(try SecretFile(parsing: older.text, source: "relay.secret").adminToken == nil)
        #expect(throws: ConfigurationError.self) { try SecretFile(parsing: older.text + "admin-token = tooshort\n", source: "relay.secret") }
    }
}
