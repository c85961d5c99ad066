import ArgumentParser
import ParleyWire

@main
struct ParleyRelayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "parley-relay",
        abstract: "Forward Parley voice calls between the members of each room.",
        version: ParleyVersion.string,
        subcommands: []
    )
}
