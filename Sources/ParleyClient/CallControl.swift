import ParleyWire

/// One thing a person (a key, `parley ctl`, a script) asks of a running call, and its words
/// on the control socket: `mute`, `unmute`, `deafen`, `undeafen`, `ptt on|off` (push-to-talk
/// mode), `ptt press`, `ptt release`, `volume PERSON PERCENT`, `say TEXT`, `leave`, `status`,
/// and in an end-to-end encrypted room `verify [PERSON]` and `trust PERSON`.
///
/// The words are the wire format of the control socket, one request a line, so the parser
/// takes any bytes a local program may send and refuses what it cannot read with a message
/// that says what would have been right.
public enum CallControl: Equatable, Sendable {
    case mute
    case unmute
    /// Deafened: nothing is played and nothing is sent.
    case deafen
    case undeafen
    /// Push-to-talk mode on or off: while on, the microphone is sent only while pressed.
    case pushToTalkMode(Bool)
    case pushToTalkPress
    case pushToTalkRelease
    /// One member's loudness in this client's mix, 0–200 % (0 mutes them here only).
    case volume(person: String, percent: Int)
    /// A text message to everyone else in the room: the rest of the line, as typed.
    case say(String)
    case leave
    case status
    /// The safety number shared with PERSON (or everyone's, with their fingerprints), to read
    /// aloud to each other.
    case verify(person: String?)
    /// Accept PERSON's changed identity key (after comparing the safety number).
    case trust(person: String)
    /// A moderator's request to the relay: server-mute, server-unmute, kick, close the room
    /// (`CallControl+Moderation.swift`).
    case moderate(ControlMessage.ModerationRequest)

    /// The longest request line the socket accepts, newline excluded.
    public static let maximumLineBytes = 512
    public static let maximumVolumePercent = 200

    /// What `parley ctl --help` and an error list.
    public static let usage = "mute | unmute | deafen | undeafen | ptt on|off|press|release | volume PERSON PERCENT | say TEXT | leave | status"
        + " | verify [PERSON] | trust PERSON"
        + " | server-mute PERSON | server-unmute PERSON | kick PERSON [--for DURATION] [--reason TEXT] | close-room [--reason TEXT]"

    /// Reads one request (without its newline).
    public init(parsing line: String) throws(CallControlError) {
        let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard let verb = words.first?.lowercased() else { throw .malformed("the request is empty; send one of: \(Self.usage)") }
        let arguments = Array(words.dropFirst())
        func noArguments(_ control: CallControl) throws(CallControlError) -> CallControl {
            guard arguments.isEmpty else { throw .malformed("'\(verb)' takes nothing after it") }
            return control
        }
        switch verb {
        case "mute": self = try noArguments(.mute)
        case "unmute": self = try noArguments(.unmute)
        case "deafen": self = try noArguments(.deafen)
        case "undeafen": self = try noArguments(.undeafen)
        case "leave": self = try noArguments(.leave)
        case "status": self = try noArguments(.status)
        case "verify":
            guard arguments.count <= 1 else { throw .malformed("'verify' takes at most one person, like: verify bob") }
            self = .verify(person: arguments.first)
        case "trust":
            guard arguments.count == 1 else { throw .malformed("'trust' takes the person whose new key you accept, like: trust bob") }
            self = .trust(person: arguments[0])
        case "ptt":
            guard arguments.count == 1 else { throw .malformed("'ptt' takes one of on, off, press, release") }
            switch arguments[0].lowercased() {
            case "on": self = .pushToTalkMode(true)
            case "off": self = .pushToTalkMode(false)
            case "press": self = .pushToTalkPress
            case "release": self = .pushToTalkRelease
            default: throw .malformed("'ptt \(arguments[0])': use ptt on, off, press or release")
            }
        case "say":
            // The words after `say`, spaces kept as typed.
            let text = String(line.drop { $0 == " " || $0 == "\t" }.dropFirst(verb.count).drop { $0 == " " || $0 == "\t" })
            guard !text.isEmpty else { throw .malformed("'say' takes the message after it, like: say back in five minutes") }
            if let problem = ControlMessage.Text.problem(with: text) { throw .malformed("'say': \(problem)") }
            self = .say(text)
        case "volume":
            guard arguments.count == 2 else { throw .malformed("'volume' takes a person and a percentage, like: volume bob 50") }
            let person = arguments[0]
            var digits = Substring(arguments[1])
            if digits.hasSuffix("%") { digits = digits.dropLast() }
            guard let percent = Int(digits), (0...Self.maximumVolumePercent).contains(percent) else {
                throw .malformed("'volume \(person) \(arguments[1])': the volume is a whole percentage from 0 (silent) to \(Self.maximumVolumePercent)")
            }
            self = .volume(person: person, percent: percent)
        case _ where Self.moderationVerbs.contains(verb):
            self = try Self.moderation(verb: verb, arguments: arguments)
        default:
            throw .malformed("'\(verb.prefix(40))' is not a request; send one of: \(Self.usage)")
        }
    }

    /// The request as the socket carries it.
    public var line: String {
        switch self {
        case .mute: "mute"
        case .unmute: "unmute"
        case .deafen: "deafen"
        case .undeafen: "undeafen"
        case let .pushToTalkMode(on): on ? "ptt on" : "ptt off"
        case .pushToTalkPress: "ptt press"
        case .pushToTalkRelease: "ptt release"
        case let .volume(person, percent): "volume \(person) \(percent)"
        case let .say(text): "say \(text)"
        case .leave: "leave"
        case .status: "status"
        case let .verify(person): person.map { "verify \($0)" } ?? "verify"
        case let .trust(person): "trust \(person)"
        case let .moderate(request): Self.moderationLine(request)
        }
    }
}

public enum CallControlError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The request cannot be read.
    case malformed(String)
    /// The request names someone who is not in the call.
    case unknownPerson(String, members: [String])

    public var description: String {
        switch self {
        case let .malformed(reason): reason
        case let .unknownPerson(person, members):
            "nobody called '\(person)' is in the call" + (members.isEmpty ? "" : "; in it: " + members.joined(separator: ", "))
        }
    }
}
