import Foundation
import ParleyBasics
import ParleyClient
import ParleyRelay
import Testing

/// What every command's `--help` says, read as a person reads it in an 80-column terminal:
/// its exit statuses are exactly the ones the code exits with (the enums the commands use),
/// and no example or list line is wrapped into the left margin, where copying it would
/// break a command in two.
@Suite("Each command's help")
struct HelpTextTests {
    struct Command: Sendable, CustomStringConvertible {
        let binary: String
        let arguments: [String]
        /// The statuses the command exits with, as its code has them.
        let statuses: [(Int32, String)]

        init<Status: CommandExitStatus>(_ binary: String, _ arguments: [String], _ status: Status.Type) {
            self.binary = binary
            self.arguments = arguments
            statuses = Status.allCases.map { ($0.rawValue, $0.meaning) }
        }

        var description: String { ([binary] + arguments).joined(separator: " ") }
    }

    static let commands: [Command] = [
        Command("parley", [], CallExitStatus.self),
        Command("parley", ["call"], CallExitStatus.self),
        Command("parley", ["ctl"], CtlExitStatus.self),
        Command("parley", ["process"], ProcessExitStatus.self),
        Command("parley", ["devices"], DevicesExitStatus.self),
        Command("parley", ["netsim"], NetsimExitStatus.self),
        Command("parley-relay", ["serve"], ServeExitStatus.self),
        Command("parley-relay", ["token"], TokenExitStatus.self),
        Command("parley-relay", ["keygen"], KeygenExitStatus.self),
        Command("parley-relay", ["admin"], AdminExitStatus.self),
        Command("parley-relay", ["admin", "rooms"], AdminExitStatus.self),
        Command("parley-relay", ["admin", "kick"], AdminExitStatus.self),
        Command("parley-relay", ["admin", "mute"], AdminExitStatus.self),
        Command("parley-relay", ["admin", "unmute"], AdminExitStatus.self),
        Command("parley-relay", ["admin", "close"], AdminExitStatus.self),
    ]

    /// The command's help as a terminal of `columns` columns shows it.
    static func help(_ command: Command, columns: Int) throws -> String {
        let binary = (try relayBinary() as NSString).deletingLastPathComponent + "/" + command.binary
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = command.arguments + ["--help"]
        process.environment = ["COLUMNS": "\(columns)", "PATH": "/usr/bin:/bin"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }

    @Test(arguments: commands)
    func theHelpListsExactlyTheExitStatusesTheCommandUses(_ command: Command) throws {
        let help = try Self.help(command, columns: 80)
        let lines = help.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let start = try #require(lines.firstIndex { $0.trimmingCharacters(in: .whitespaces) == "Exit status:" }, "\(command): no exit statuses in\n\(help)")
        var listed: [(Int32, String)] = []
        for line in lines[(start + 1)...] {
            guard let match = line.wholeMatch(of: #/ *(\d+)  (.+)/#), let code = Int32(match.1) else { break }
            listed.append((code, String(match.2)))
        }
        #expect(listed.map(\.0) == command.statuses.map(\.0), "\(command) lists \(listed.map(\.0)), exits with \(command.statuses.map(\.0))")
        #expect(listed.map(\.1) == command.statuses.map(\.1), "\(command): the meanings differ")
    }

    /// Prose may wrap; a line a person copies (an example, a list item, an exit status) is
    /// written within 80 columns, so at 80 it is shown as written.
    @Test(arguments: commands)
    func noExampleOrListLineIsWrappedInAnEightyColumnTerminal(_ command: Command) throws {
        let wide = try Self.help(command, columns: 1_000)
        let narrow = try Self.help(command, columns: 80)
        let overview = wide.components(separatedBy: "\nUSAGE:").first ?? wide
        let indented = overview.split(separator: "\n").map(String.init).filter { $0.hasPrefix(" ") }
        for line in indented {
            #expect(line.count <= 80, "\(command): an indented help line of \(line.count) columns: \(line)")
        }
        let shown = Set(narrow.split(separator: "\n").map(String.init))
        for line in indented where line.count <= 80 {
            #expect(shown.contains(line), "\(command): at 80 columns this line is not shown whole: \(line)")
        }
        // The usage line is ArgumentParser's synopsis, which it never wraps.
        let wider = narrow.split(separator: "\n").filter { $0.count > 80 && !$0.hasPrefix("USAGE:") }
        #expect(wider.isEmpty, "\(command): lines wider than 80 columns: \(wider)")
    }

    /// The README's table of `parley call`'s exit statuses is the one the code uses.
    @Test func theReadmesExitStatusTableIsTheCallsOwn() throws {
        let readme = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("README.md"), encoding: .utf8)
        let rows = readme.split(separator: "\n").compactMap { line -> (Int32, String)? in
            guard let match = line.wholeMatch(of: #/\| (\d+) \| (.+) \|/#), let code = Int32(match.1) else { return nil }
            return (code, String(match.2))
        }
        #expect(rows.map(\.0) == CallExitStatus.allCases.map(\.rawValue), "the README's table: \(rows.map(\.0))")
        #expect(rows.map(\.1) == CallExitStatus.allCases.map(\.meaning), "the README's meanings: \(rows.map(\.1))")
    }
}
