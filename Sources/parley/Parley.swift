import ArgumentParser
import ParleyWire

@main
struct Parley: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "parley",
        abstract: "Talk with others through a Parley relay.",
        version: ParleyVersion.string,
        subcommands: [
            ProcessCommand.self,
            DevicesCommand.self,
            NetsimCommand.self,
        ]
    )
}
