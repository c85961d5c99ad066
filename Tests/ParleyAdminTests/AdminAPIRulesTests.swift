import ParleyAdmin
import ParleyBasics
import ParleyRelay
import ParleyWire
import Testing

/// The admin API as plain rules, with no socket: who may call it, which request a method,
/// path and body make, and a body parser that survives any bytes.
@Suite("Admin API rules")
struct AdminAPIRulesTests {
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
