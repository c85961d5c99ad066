import ArgumentParser
import Foundation
import ParleyWire

@main
struct Parley: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "parley",
        abstract: "Talk with others through a Parley relay.",
        discussion: """
            Start with the invite you were sent:
              parley call 'parley://relay.example.org:7800/standup?token=…&key=…'

            Exit status, the same for every command: 0 done; 1 unexpected failure; 2 a bad \
            flag or value; 3 the relay is unreachable; 4 the relay's key or handshake is wrong; \
            5 the token was refused; 6 the room is full or the relay has too many rooms; \
            7 the relay refused for another reason; 8 replaced by another session of yours; \
            9 a sound device is missing or busy; 10 an input WAV cannot be used; 11 an output \
            file cannot be written.
            """,
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
