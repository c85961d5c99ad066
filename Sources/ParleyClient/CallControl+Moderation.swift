import ParleyBasics
import ParleyWire

/// A moderator's words on the control socket:
///
/// ```
/// server-mute PERSON                              the relay drops PERSON's audio for everyone
/// server-unmute PERSON
/// kick PERSON [--for DURATION] [--reason TEXT…]   removes PERSON; no rejoining for DURATION (default 5m)
/// close-room [--reason TEXT…]                     removes everyone
/// ```
///
/// The relay decides (it checks the `mod` claim of this member's token); what is checked
/// here is only what the person can fix in their own words: the duration and the reason.
extension CallControl {
    static let moderationVerbs: Set<String> = ["server-mute", "server-unmute", "kick", "close-room"]

    static func moderation(verb: String, arguments: [String]) throws(CallControlError) -> CallControl {
        switch verb {
        case "server-mute", "server-unmute":
            guard arguments.count == 1 else { throw .malformed("'\(verb)' takes the person's name, like: \(verb) bob") }
            return .moderate(.init(action: verb == "server-mute" ? .serverMute : .serverUnmute, target: arguments[0]))
        case "kick":
            guard let person = arguments.first, !person.hasPrefix("--") else {
                throw .malformed("'kick' takes the person's name first, like: kick bob --for 10m --reason shouting")
            }
            let options = try options(Array(arguments.dropFirst()), verb: verb, allowsDuration: true)
            return .moderate(.init(action: .kick, target: person, banSeconds: options.seconds, reason: options.reason))
        default:
            let options = try options(arguments, verb: verb, allowsDuration: false)
            return .moderate(.init(action: .closeRoom, reason: options.reason))
        }
    }

    /// `--for DURATION` and `--reason TEXT…` (the reason takes every word after it).
    private static func options(_ words: [String], verb: String, allowsDuration: Bool) throws(CallControlError) -> (seconds: UInt32, reason: String) {
        var seconds: UInt32 = 0
        var reason = ""
        var index = 0
        while index < words.count {
            switch words[index] {
            case "--for" where allowsDuration:
                guard index + 1 < words.count else { throw .malformed("'--for' needs a duration, like --for 10m") }
                seconds = try banSeconds(words[index + 1])
                index += 2
            case "--reason":
                reason = words[(index + 1)...].joined(separator: " ")
                guard !reason.isEmpty else { throw .malformed("'--reason' needs the words the person will read") }
                try check(reason: reason)
                index = words.count
            default:
                let options = allowsDuration ? "--for DURATION and --reason TEXT" : "--reason TEXT"
                throw .malformed("'\(verb)' does not take '\(words[index].prefix(40))'; it takes \(options)")
            }
        }
        return (seconds, reason)
    }

    static func banSeconds(_ text: String) throws(CallControlError) -> UInt32 {
        let maximum = ControlMessage.ModerationRequest.maximumBanSeconds
        guard let milliseconds = DurationText.milliseconds(text), milliseconds >= 1_000 else {
            throw .malformed("'--for \(text.prefix(20))': write a duration of at least 1s, like 90s, 10m or 2h")
        }
        guard milliseconds / 1_000 <= Int(maximum) else {
            throw .malformed("'--for \(text.prefix(20))': a kick keeps someone out for at most \(maximum / 86_400) days")
        }
        return UInt32(milliseconds / 1_000)
    }

    static func check(reason: String) throws(CallControlError) {
        let limit = ControlMessage.ModerationRequest.maximumReasonBytes
        guard reason.utf8.count <= limit else {
            throw .malformed("the reason is \(reason.utf8.count) bytes; at most \(limit), so say it in fewer words")
        }
        guard reason.firstScalarChangingHowItReads == nil else {
            throw .malformed("the reason may not contain control characters, line breaks, bidirectional controls or invisible formatting characters")
        }
    }

    static func moderationLine(_ request: ControlMessage.ModerationRequest) -> String {
        var words: [String]
        switch request.action {
        case .serverMute: words = ["server-mute", request.target]
        case .serverUnmute: words = ["server-unmute", request.target]
        case .kick:
            words = ["kick", request.target]
            if request.banSeconds > 0 { words += ["--for", "\(request.banSeconds)s"] }
        case .closeRoom, .unknown: words = ["close-room"]
        }
        if !request.reason.isEmpty { words += ["--reason", request.reason] }
        return words.joined(separator: " ")
    }
}
