import ArgumentParser
import Foundation
import ParleyClient
import ParleyWire

@main
struct Parley: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "parley",
        abstract: "Talk with others through a Parley relay.",
        discussion: """
            Start with the invite you were sent:
              parley call 'parley://relay.example.org:7800/standup?token=…&key=…'

            Each command's --help lists the exit statuses it uses; `parley call`'s:
            """ + "\n" + CallExitStatus.helpText,
        version: ParleyVersion.string,
        subcommands: [
            CallCommand.self,
            CtlCommand.self,
            ProcessCommand.self,
            DevicesCommand.self,
            NetsimCommand.self,
        ]
    )

    static func main() {
        do {
            var command = try parseAsRoot()
            try command.run()
        } catch {
            if exitCode(for: error) == .validationFailure {
                // swift-argument-parser exits 64 on usage errors; Parley's contract is 2.
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(2)
            }
            exit(withError: error)
        }
    }
}
