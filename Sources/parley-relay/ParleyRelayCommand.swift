import ArgumentParser
import ParleyRelay
import ParleyWire

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `parley-relay`: serve rooms, mint access tokens, make the secret, run rooms.
///
/// Each command's exit statuses are its own (``ServeExitStatus`` and the others, listed in
/// its `--help`); 2 is always a bad flag, variable or config value, the message saying which
/// and how to fix it.
@main
struct ParleyRelayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "parley-relay",
        abstract: "Forward Parley voice calls between the members of each room.",
        discussion: """
        A relay on a VPS in three steps:

          parley-relay keygen --out /etc/parley/relay.secret
          parley-relay serve --secret-file /etc/parley/relay.secret
          parley-relay token --secret-file /etc/parley/relay.secret \\
              --room standup --identity ada --relay relay.example.org:7800

        Each command's --help lists the exit statuses it uses.
        """,
        version: ParleyVersion.string,
        subcommands: [ServeCommand.self, TokenCommand.self, KeygenCommand.self, AdminCommand.self]
    )

    static func main() {
        do {
            var command = try parseAsRoot()
            try command.run()
        } catch let error as ConfigurationError {
            fail(error.message)
        } catch {
            let code = exitCode(for: error)
            if code == .validationFailure {
                // swift-argument-parser exits 64 on usage errors; Parley's contract is 2.
                var standardError = StandardError()
                print(fullMessage(for: error), to: &standardError)
                Glibc.exit(2)
            }
            exit(withError: error)
        }
    }

    static func fail(_ message: String) -> Never {
        var standardError = StandardError()
        print("parley-relay: \(message)", to: &standardError)
        Glibc.exit(2)
    }
}

struct StandardError: TextOutputStream {
    mutating func write(_ string: String) {
        var bytes = Array(string.utf8)
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(2, $0.baseAddress, $0.count) }
            guard written > 0 else { return }
            bytes.removeFirst(written)
        }
    }
}
