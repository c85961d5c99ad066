import ArgumentParser
import ParleyRelay

struct KeygenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Write a new random secret for signing access tokens (mode 0600).",
        discussion: """
        Example:

          parley-relay keygen --out /etc/parley/relay.secret

        The file holds `token-secret = …` (32 random bytes, base64) with comments; it is never overwritten unless you pass --force, because every token signed with the old secret stops working.
        """
    )

    @Option(help: ArgumentHelp("Where to write the secret.", valueName: "file"))
    var out: String
    @Flag(help: "Replace the file if it exists (old tokens stop working).")
    var force = false

    func run() throws {
        try SecretFile(tokenSecret: .random()).write(path: out, overwrite: force)
        print("wrote a new secret to \(out) (mode 0600); start the relay with --secret-file \(out)")
    }
}
