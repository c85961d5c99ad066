import ArgumentParser
import ParleyRelay
import ParleySecurity

struct KeygenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Write a new secret file: the token-signing secret and the relay's key pair (mode 0600).",
        discussion: """
        Example:

          parley-relay keygen --out /etc/parley/relay.secret

        The file holds `token-secret = …` (32 random bytes that sign access tokens), `relay-private-key = …` (the relay's X25519 key; invites carry its public key and clients pin it) and `admin-token = …` (opens the admin API: `parley-relay admin`, or curl with `Authorization: Bearer …`). It is never overwritten unless you pass --force, because every token and invite made with the old file stops working.
        """ + "\n\n" + KeygenExitStatus.helpText
    )

    @Option(help: ArgumentHelp("Where to write the secret.", valueName: "file"))
    var out: String
    @Flag(help: "Replace the file if it exists (old tokens stop working).")
    var force = false

    func run() throws {
        let secrets = SecretFile.random()
        try secrets.write(path: out, overwrite: force)
        print("wrote a new secret and key pair to \(out) (mode 0600); start the relay with --secret-file \(out)")
        if let key = secrets.relayKey { print("relay public key: \(key.publicKeyText)") }
    }
}
