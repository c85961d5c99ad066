import ArgumentParser
import ParleyBasics
import ParleyRelay
import ParleyWire

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

struct TokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print an access token and, last, an invite URL for one person and room.",
        discussion: """
        Example:

          parley-relay token --secret-file /etc/parley/relay.secret \\
              --room standup --identity ada --ttl 7d --relay relay.example.org:7800

        prints the token, then parley://relay.example.org:7800/standup?token=…&key=… which the client accepts. The key is the relay's public key: the client pins it, so nobody between the two can pose as the relay; mint an invite with the secret file of the relay it names. With --moderator the person may server-mute, kick and close the room from their call. With --e2ee the room is end-to-end encrypted: each member seals its voice with keys only members hold, so the relay forwards what it cannot hear (give it to every invite of the room; README, "End-to-end encryption"). In a cluster whose relays have regions, --region says where the person is: the room is placed there if it is new, and the person joins on a relay of that region (trunked to the room's others) — docs/CLUSTER.md. Tokens are standard HS256 JWTs (claims sub, room, iat, exp, nbf, pub, mod, region, e2ee), so a web app holding the same secret can mint them too.
        """ + "\n\n" + TokenExitStatus.helpText
    )

    @Option(help: ArgumentHelp("The file `parley-relay keygen` wrote.", valueName: "file"))
    var secretFile: String = "/etc/parley/relay.secret"
    @Option(help: ArgumentHelp("The room: 1–64 of A–Z a–z 0–9 . _ -", valueName: "room"))
    var room: String
    @Option(help: ArgumentHelp("The person's name in the room (1–64 bytes, no control characters).", valueName: "name"))
    var identity: String
    @Option(help: ArgumentHelp("How long the token is valid, e.g. 90m, 24h, 7d.", valueName: "duration"))
    var ttl: String = "24h"
    @Option(help: ArgumentHelp("The relay's address as clients reach it. Default: this machine's name, port 7800.", valueName: "host:port"))
    var relay: String?
    @Flag(help: "The member may listen but not send audio.")
    var listenOnly = false
    @Flag(help: "The member is a moderator: may server-mute, kick and close the room (`parley ctl kick NAME`).")
    var moderator = false
    @Option(help: ArgumentHelp("In a cluster: the region the person joins in (a relay's --region), e.g. eu-west.", valueName: "region"))
    var region: String?
    @Flag(help: "Leave the relay's key out of the invite, for a relay run with --insecure.")
    var insecure = false
    @Flag(help: "The room is end-to-end encrypted: the relay forwards voices it cannot open. Give it to every invite of the room.")
    var e2ee = false

    func run() throws {
        if let problem = ParleyNames.problem(withRoom: room) { throw ConfigurationError("--room: \(problem)") }
        if let problem = ParleyNames.problem(withIdentity: identity) { throw ConfigurationError("--identity: \(problem)") }
        if let region, let problem = ParleyNames.problem(withRegion: region) { throw ConfigurationError("--region \(problem)") }
        guard let milliseconds = DurationText.milliseconds(ttl), milliseconds >= 1000 else {
            throw ConfigurationError("--ttl is \"\(ttl)\"; write a duration of at least 1s, such as 90m, 24h or 7d")
        }
        guard milliseconds <= 366 * 86_400_000 else {
            throw ConfigurationError("--ttl is \(ttl); at most a year (366d), so a leaked invite does not work forever")
        }
        let secret = try SecretFile.load(path: secretFile) { warning in
            var standardError = StandardError()
            print("parley-relay: warning: \(warning)", to: &standardError)
        }
        var relayText = relay
        if relayText == nil {
            relayText = "\(Self.hostName()):\(InviteURL.defaultPort)"
            var standardError = StandardError()
            print("parley-relay: no --relay given; the invite names \(relayText!) (pass --relay HOST:PORT as clients reach it)", to: &standardError)
        }
        let (host, port) = try Self.parseRelay(relayText!)
        let now = unixNow()
        let token = AccessToken(identity: identity, room: room, issuedAt: now, expiresAt: now + Int64(milliseconds / 1000),
                                canPublish: !listenOnly, isModerator: moderator, region: region, endToEndEncrypted: e2ee)
        let signed = token.signed(with: secret.tokenSecret)
        var parameters: [(name: String, value: String)] = []
        if !insecure {
            guard let key = secret.relayKey else {
                throw ConfigurationError("\(secretFile) has no relay-private-key line, so the invite cannot carry the relay's key; make a new secret file with `parley-relay keygen --out \(secretFile) --force`, or pass --insecure for a relay run without encryption")
            }
            parameters.append((InviteURL.relayKeyParameter, key.publicKeyText))
        }
        let invite = InviteURL(host: host, port: port, room: room, token: signed, parameters: parameters)
        // Prove the invite reads back before handing it to a person.
        guard (try? InviteURL(parsing: invite.description)) == invite else {
            throw ConfigurationError("--relay \(relayText!) does not make a valid invite; give a host name or IP address and a port")
        }
        print(signed)
        print(invite.description)
    }

    static func parseRelay(_ text: String) throws(ConfigurationError) -> (String, Int) {
        do {
            let parsed = try InviteURL(parsing: "parley://\(text)/r?token=t")
            return (parsed.host, parsed.port)
        } catch {
            throw ConfigurationError("--relay is \"\(text)\"; write HOST:PORT as clients reach the relay, e.g. relay.example.org:7800 or [2001:db8::1]:7800")
        }
    }

    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "localhost" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

func unixNow() -> Int64 { WallClock.seconds() }
