import ParleyBasics
import ParleyWire
import Testing
@testable import ParleyRelay

/// Room control as plain rules, with no socket and no clock: the ban list and its bounds,
/// a room's server-mutes, the admin token, and the admin API's requests and bodies.
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

    @Test func theAdminAPIAsksForTheTokenAndNamesWhatIsWrong() throws {
        let token = AdminToken.random()
        func route(_ method: String, _ path: String, _ authorization: String?, _ body: String = "", token: AdminToken? = token) -> Result<AdminAPI.Route, AdminAPI.ResponseError> {
            AdminAPI.route(method: method, path: path, authorization: authorization, body: Array(body.utf8), token: token)
        }
        func status(_ result: Result<AdminAPI.Route, AdminAPI.ResponseError>) -> Int? {
            if case let .failure(error) = result { return error.response.status }
            return nil
        }
        let bearer = token.authorizationHeader
        #expect(status(route("GET", "/admin/rooms", nil)) == 401)
        #expect(status(route("GET", "/admin/rooms", "Bearer " + AdminToken.random().text)) == 401)
        #expect(status(route("GET", "/admin/rooms", bearer, token: nil)) == 404, "no admin-token in the secret file: the API is off")
        #expect(try route("GET", "/admin/rooms", bearer).get() == .rooms)
        #expect(status(route("GET", "/admin/kick", bearer)) == 405)
        #expect(status(route("POST", "/admin/nothing", bearer)) == 404)
        #expect(try route("POST", "/admin/kick", bearer, #"{"room":"standup","identity":"bob","seconds":600,"reason":"spam"}"#).get()
            == .moderate(.init(action: .kick, target: "bob", banSeconds: 600, reason: "spam"), room: "standup"))
        #expect(try route("POST", "/admin/close", bearer, #"{"room":"standup"}"#).get() == .moderate(.init(action: .closeRoom), room: "standup"))
        let cases: [(String, String)] = [
            ("", "needs a JSON body"),
            ("[1,2]", "not a JSON object"),
            (#"{"identity":"bob"}"#, "has no"),
            (#"{"room":"stand up","identity":"bob"}"#, "room: "),
            (#"{"room":"standup"}"#, "the member's name"),
            (#"{"room":"standup","identity":5}"#, "wrong type"),
            (#"{"room":"standup","identity":"bob","seconds":0}"#, "from 1 to"),
            (#"{"room":"standup","identity":"bob","seconds":1e300}"#, "from 1 to"),
        ]
        for (body, expected) in cases {
            guard case let .failure(error) = route("POST", "/admin/kick", bearer, body) else { Issue.record("accepted \(body)"); continue }
            let text = String(decoding: error.response.body, as: UTF8.self)
            #expect(error.response.status == 400 && text.contains(expected), "\(body) → \(text)")
        }
    }

    @Test func theAdminBodyParserSurvivesAnyBytesWithAClearError() {
        var random = SplitMix64(seed: 0x4144_4D49)
        let valid = Array(#"{"room":"standup","identity":"bob","seconds":600,"reason":"spam"}"#.utf8)
        for round in 0..<5_000 {
            var bytes: [UInt8]
            switch round % 3 {
            case 0: bytes = (0..<Int.random(in: 0...300, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            case 1: bytes = Array(valid.prefix(Int.random(in: 0...valid.count, using: &random)))
            default:
                bytes = valid
                for _ in 0..<Int.random(in: 1...4, using: &random) {
                    bytes[Int.random(in: 0..<bytes.count, using: &random)] ^= 1 << UInt8.random(in: 0...7, using: &random)
                }
            }
            for action in [ControlMessage.ModerationAction.kick, .serverMute, .closeRoom] {
                do {
                    let body = try ModerationBody(parsing: bytes, action: action)
                    #expect(ParleyNames.problem(withRoom: body.room) == nil)
                    #expect(ModerationCheck.problem(with: body.moderation) == nil)
                } catch {
                    #expect(!error.message.isEmpty)
                }
            }
        }
    }
}
