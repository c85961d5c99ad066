import ArgumentParser
import Foundation
import ParleyAdmin
import ParleyBasics
import ParleyRelay
import ParleyWire

/// `parley-relay admin`: the admin API from a shell, with the token read from the secret file.
struct AdminCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin",
        abstract: "List rooms, kick, server-mute or close a room on a running relay (its admin API).",
        discussion: """
        Talks to the relay's admin port with the admin-token from its secret file, both found as `serve` finds them: --admin and --secret-file, else PARLEY_RELAY_ADMIN and PARLEY_RELAY_SECRET_FILE, else the config file (--config, PARLEY_RELAY_CONFIG, or /etc/parley/relay.conf), else 127.0.0.1:9800 and /etc/parley/relay.secret. Examples:

          parley-relay admin rooms
          parley-relay admin kick standup bob --for 10m \\
              --reason "shouting over everyone"
          parley-relay admin mute standup bob
          parley-relay admin unmute standup bob
          parley-relay admin close standup --reason "the meeting is over"
        """ + "\n\n" + AdminExitStatus.helpText,
        subcommands: [Rooms.self, Kick.self, Mute.self, Unmute.self, Close.self]
    )

    struct Connection: ParsableArguments {
        @Option(help: ArgumentHelp("The relay's admin address. Default: as `serve` reads it, else 127.0.0.1:9800.", valueName: "host:port"))
        var admin: String?
        @Option(help: ArgumentHelp("The relay's secret file, which holds the admin-token. Default: as `serve` reads it.", valueName: "file"))
        var secretFile: String?
        @Option(help: ArgumentHelp("The relay's config file, to read admin and secret-file from.", valueName: "file"))
        var config: String?

        /// Sends the request; prints the answer's message, or fails with the exit status its status means.
        func send(method: String, path: String, body: [String: Any]? = nil) throws -> [UInt8] {
            let layers = try ServeCommand.layers(flags: ["admin": admin, "secret-file": secretFile].compactMapValues { $0 }, config: config)
            guard let address = try AdminSettings.resolve(layers).address else {
                throw ConfigurationError("the relay's admin port is off (admin = off); give --admin HOST:PORT of a relay that serves it")
            }
            let secretFile = try RelayConfiguration.resolve(layers).secretFile
            let secret = try SecretFile.load(path: secretFile) { warning in
                var standardError = StandardError()
                print("parley-relay: warning: \(warning)", to: &standardError)
            }
            guard let token = secret.adminToken else {
                throw ConfigurationError("\(secretFile) has no admin-token line, so the relay runs without the admin API; "
                    + "make a new secret file with `parley-relay keygen --out \(secretFile) --force` (old tokens stop working) and restart the relay")
            }
            let bytes = try body.map { Array(try JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys])) } ?? []
            let answer: AdminClient.Answer
            do {
                answer = try AdminClient.send(method: method, path: path, body: bytes, token: token.text, to: address)
            } catch {
                AdminCommand.fail("\(error)", status: .noRelay)
            }
            guard answer.status == 200 else {
                let outcome = try? JSONDecoder().decode(AdminAPI.Outcome.self, from: Data(answer.body))
                let message = outcome?.error ?? String(decoding: answer.body.prefix(300), as: UTF8.self)
                switch answer.status {
                case 401: AdminCommand.fail("\(message) (the relay's admin-token differs from the one in \(secretFile)?)", status: .refusedToken)
                case 404 where message.hasPrefix("the admin API is off"): AdminCommand.fail(message, status: .refusedToken)
                case 404: AdminCommand.fail(message, status: .noSuchMember)
                case 400, 413: AdminCommand.fail(message, status: .refused)
                default: AdminCommand.fail("the relay answered \(answer.status): \(message)", status: .noRelay)
                }
            }
            return answer.body
        }

        func moderate(_ path: String, _ body: [String: Any]) throws {
            let answer = try send(method: "POST", path: path, body: body)
            let outcome = try? JSONDecoder().decode(AdminAPI.Outcome.self, from: Data(answer))
            print(outcome?.message ?? "done")
        }
    }

    static func fail(_ message: String, status: AdminExitStatus) -> Never {
        var standardError = StandardError()
        print("parley-relay admin: \(message)", to: &standardError)
        Foundation.exit(status.rawValue)
    }

    struct Rooms: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every room and its members: packets, loss, bitrate, server-muted, joined since.", discussion: AdminExitStatus.helpText)
        @OptionGroup var connection: Connection
        @Flag(help: "Print the API's JSON instead of a table.")
        var json = false

        func run() throws {
            let body = try connection.send(method: "GET", path: "/admin/rooms")
            if json {
                print(String(decoding: body, as: UTF8.self), terminator: "")
                return
            }
            guard let report = try? JSONDecoder().decode(AdminRoomsReport.self, from: Data(body)) else {
                AdminCommand.fail("the relay's answer is not the rooms report this version reads; try --json", status: .noRelay)
            }
            if report.rooms.isEmpty { print("no rooms open") }
            for room in report.rooms {
                print("\(room.name): \(room.members.count) member\(room.members.count == 1 ? "" : "s")")
                for member in room.members {
                    var notes: [String] = []
                    if !member.active { notes.append("joining") }
                    if member.moderator { notes.append("moderator") }
                    if !member.canPublish { notes.append("listen only") }
                    if member.serverMuted { notes.append("SERVER-MUTED") }
                    let joined = DurationWords.since(seconds: member.joinedSecondsAgo)
                    print("  \(member.identity)  joined \(joined) ago  \(member.packets) packets  loss \(String(format: "%.1f", member.lossPercent))%"
                        + "  \(member.bitsPerSecond / 1_000) kb/s" + (notes.isEmpty ? "" : "  [" + notes.joined(separator: ", ") + "]"))
                }
            }
        }
    }

    struct Kick: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove a member; they cannot rejoin the room for --for (default 5m).", discussion: AdminExitStatus.helpText)
        @OptionGroup var connection: Connection
        @Argument(help: "The room.") var room: String
        @Argument(help: "The member's name (identity).") var identity: String
        @Option(name: .customLong("for"), help: ArgumentHelp("How long they may not rejoin, e.g. 90s, 10m, 2h (at most 7d).", valueName: "duration"))
        var duration: String?
        @Option(help: ArgumentHelp("What the member is told.", valueName: "text")) var reason: String?

        func run() throws {
            var body: [String: Any] = ["room": room, "identity": identity]
            if let duration {
                guard let milliseconds = DurationText.milliseconds(duration), milliseconds >= 1_000 else {
                    throw ConfigurationError("--for is \"\(duration)\"; write a duration of at least 1s, such as 90s, 10m or 2h")
                }
                guard milliseconds / 1_000 <= Int(ControlMessage.ModerationRequest.maximumBanSeconds) else {
                    throw ConfigurationError("--for is \(duration); a kick keeps someone out for at most 7d")
                }
                body["seconds"] = milliseconds / 1_000
            }
            if let reason { body["reason"] = reason }
            try connection.moderate("/admin/kick", body)
        }
    }

    struct Mute: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Server-mute a member: the relay drops their audio for everyone.", discussion: AdminExitStatus.helpText)
        @OptionGroup var connection: Connection
        @Argument(help: "The room.") var room: String
        @Argument(help: "The member's name (identity).") var identity: String

        func run() throws { try connection.moderate("/admin/mute", ["room": room, "identity": identity]) }
    }

    struct Unmute: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Lift a server-mute.", discussion: AdminExitStatus.helpText)
        @OptionGroup var connection: Connection
        @Argument(help: "The room.") var room: String
        @Argument(help: "The member's name (identity).") var identity: String

        func run() throws { try connection.moderate("/admin/unmute", ["room": room, "identity": identity]) }
    }

    struct Close: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Close a room: every member is removed and told why.", discussion: AdminExitStatus.helpText)
        @OptionGroup var connection: Connection
        @Argument(help: "The room.") var room: String
        @Option(help: ArgumentHelp("What the members are told.", valueName: "text")) var reason: String?

        func run() throws {
            var body: [String: Any] = ["room": room]
            if let reason { body["reason"] = reason }
            try connection.moderate("/admin/close", body)
        }
    }
}

extension DurationWords {
    static func since(seconds: Double) -> String { text(seconds: UInt32(clamping: Int(seconds.rounded()))) }
}
