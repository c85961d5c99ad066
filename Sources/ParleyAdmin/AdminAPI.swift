import ParleyRelay
import ParleyWire

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The admin API's requests and answers, as plain Swift with no socket: who may call it (a
/// bearer token, compared in constant time), which request a method, path and body make,
/// and the JSON that goes back. `AdminServer` carries it over HTTP on the admin port.
///
/// ```
/// GET  /admin/rooms                                       every room, its members and their figures
/// POST /admin/kick    {"room", "identity", "seconds"?, "reason"?}
/// POST /admin/mute    {"room", "identity"}                the relay drops the member's audio
/// POST /admin/unmute  {"room", "identity"}
/// POST /admin/close   {"room", "reason"?}                 everyone out, the room gone
/// ```
public enum AdminAPI {
    /// Bodies larger than this are refused (413) without being read further.
    public static let maximumBodyBytes = 4_096
    public static let pathPrefix = "/admin/"

    public enum Route: Equatable, Sendable {
        case rooms
        case moderate(ControlMessage.ModerationRequest, room: String)
    }

    /// An answer: an HTTP status and a JSON body.
    public struct Response: Equatable, Sendable {
        public var status: Int
        public var body: [UInt8]

        static func json(_ status: Int, _ value: some Encodable) -> Response {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            var body = (try? encoder.encode(value)).map(Array.init) ?? Array(#"{"ok":false,"error":"the answer could not be written"}"#.utf8)
            body.append(0x0A)
            return Response(status: status, body: body)
        }

        static func error(_ status: Int, _ message: String) -> Response { json(status, Outcome(ok: false, message: nil, error: message)) }
    }

    /// `{"ok":true,"message":…}` or `{"ok":false,"error":…}`.
    public struct Outcome: Codable, Equatable, Sendable {
        public var ok: Bool
        public var message: String?
        public var error: String?
    }

    /// What a request asks for, or the answer refusing it. `token` is nil when the secret file
    /// has no admin token: the API is off.
    public static func route(method: String, path: String, authorization: String?, body: [UInt8], token: AdminToken?) -> Result<Route, ResponseError> {
        guard let token else {
            return .failure(.init(.error(404, "the admin API is off: the relay's secret file has no admin-token line; "
                + "make a new secret file with `parley-relay keygen --out FILE --force`, or add a line `admin-token = ` with 32 random characters")))
        }
        guard let authorization, authorization.hasPrefix("Bearer "), token.matches(authorization.dropFirst("Bearer ".count)) else {
            return .failure(.init(.error(401, authorization == nil
                ? "send the admin token from the relay's secret file: Authorization: Bearer <admin-token>"
                : "the admin token is wrong; use the admin-token line of the relay's secret file")))
        }
        let action: ControlMessage.ModerationAction
        switch (method, path) {
        case ("GET", "/admin/rooms"): return .success(.rooms)
        case ("POST", "/admin/kick"): action = .kick
        case ("POST", "/admin/mute"): action = .serverMute
        case ("POST", "/admin/unmute"): action = .serverUnmute
        case ("POST", "/admin/close"): action = .closeRoom
        case (_, "/admin/rooms"), (_, "/admin/kick"), (_, "/admin/mute"), (_, "/admin/unmute"), (_, "/admin/close"):
            return .failure(.init(.error(405, "\(path) takes \(path == "/admin/rooms" ? "GET" : "POST")")))
        default:
            return .failure(.init(.error(404, "no such endpoint; the admin API has GET /admin/rooms and POST /admin/kick, /admin/mute, /admin/unmute, /admin/close")))
        }
        do {
            let request = try ModerationBody(parsing: body, action: action)
            return .success(.moderate(request.moderation, room: request.room))
        } catch {
            return .failure(.init(.error(400, error.message)))
        }
    }

    /// The answer to a moderation, as HTTP: 200 done, 404 no such room or member, 400 otherwise.
    public static func response(to reply: ControlMessage.ModerationReply) -> Response {
        switch reply.outcome {
        case .done: return .json(200, Outcome(ok: true, message: reply.message))
        case .noSuchMember: return .error(404, reply.message)
        case .invalid, .notModerator, .rateLimited, .unknown: return .error(400, reply.message)
        }
    }

    public struct ResponseError: Error, Equatable, Sendable {
        public var response: Response
        init(_ response: Response) { self.response = response }
    }
}

/// The JSON body of a moderation request: `{"room": "standup", "identity": "bob",
/// "seconds": 600, "reason": "shouting"}`, checked field by field with a message that names
/// the field, whatever bytes arrive.
public struct ModerationBody: Sendable, Equatable {
    public var room: String
    public var moderation: ControlMessage.ModerationRequest

    private struct Fields: Decodable {
        var room: String?
        var identity: String?
        var seconds: Double?
        var reason: String?
    }

    public init(parsing body: [UInt8], action: ControlMessage.ModerationAction) throws(ConfigurationError) {
        guard !body.isEmpty else { throw ConfigurationError("the request needs a JSON body, like {\"room\":\"standup\",\"identity\":\"bob\"}") }
        guard body.count <= AdminAPI.maximumBodyBytes else { throw ConfigurationError("the body is larger than \(AdminAPI.maximumBodyBytes) bytes") }
        let fields: Fields
        do {
            fields = try JSONDecoder().decode(Fields.self, from: Data(body))
        } catch DecodingError.typeMismatch(_, let context) where !context.codingPath.isEmpty {
            throw ConfigurationError("\(context.codingPath[0].stringValue) has the wrong type: room, identity and reason are strings, seconds a number")
        } catch DecodingError.valueNotFound(_, let context) where !context.codingPath.isEmpty {
            throw ConfigurationError("\(context.codingPath[0].stringValue) is null: room, identity and reason are strings, seconds a number")
        } catch {
            throw ConfigurationError("the body is not a JSON object; send {\"room\":\"standup\",\"identity\":\"bob\"}")
        }
        guard let room = fields.room else { throw ConfigurationError("the body has no \"room\"") }
        if let problem = ParleyNames.problem(withRoom: room) { throw ConfigurationError("room: \(problem)") }
        self.room = room
        var request = ControlMessage.ModerationRequest(action: action)
        if action != .closeRoom {
            guard let identity = fields.identity else { throw ConfigurationError("the body has no \"identity\": the member's name") }
            if let problem = ParleyNames.problem(withIdentity: identity) { throw ConfigurationError("identity: \(problem)") }
            request.target = identity
        }
        if let seconds = fields.seconds {
            guard action == .kick else { throw ConfigurationError("seconds goes with a kick only") }
            let maximum = ControlMessage.ModerationRequest.maximumBanSeconds
            guard seconds.isFinite, seconds >= 1, seconds <= Double(maximum) else {
                throw ConfigurationError("seconds is the ban's length: from 1 to \(maximum) (7 days)")
            }
            request.banSeconds = UInt32(seconds.rounded())
        }
        if let reason = fields.reason {
            guard action == .kick || action == .closeRoom else { throw ConfigurationError("reason goes with a kick or a close only") }
            request.reason = reason
        }
        if let problem = ModerationCheck.problem(with: request) { throw ConfigurationError(problem) }
        moderation = request
    }
}
