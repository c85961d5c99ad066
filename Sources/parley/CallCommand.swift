import ArgumentParser
import Foundation
import NIOCore
import ParleyClient
import ParleyNetSim
import ParleySecurity
import ParleyWire

/// `parley call`: join a room through a relay and talk.
struct CallCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "call",
        abstract: "Join a room through a relay and talk.",
        discussion: """
            Give the invite you were sent, or --relay, --room and --token. The microphone and \
            speaker are ALSA's default devices unless --input and --output name others \
            (alsa:NAME, see `parley devices`) or WAV files: a WAV input is played into the \
            call in real time, like a microphone, and a WAV output records what you hear.

            Examples:
              parley call 'parley://relay.example.org:7800/standup?token=…&key=…'
              parley call INVITE --input hello.wav --output heard.wav --duration 30 --quiet

            A status line on standard error shows who is in the room and who speaks, the \
            round trip to the relay, the loss on the way up and down, the jitter buffer's \
            delay, how much audio was concealed, the bitrate and xruns; --quiet hides it. \
            Ctrl-C leaves the room cleanly (the others see it at once) and prints a summary; \
            --stats-json writes the same figures as JSON.

            During a call, on a terminal, a live roster replaces the status line and keys act \
            at once: m mute, d deafen, t push-to-talk on/off, space talk/stop in push-to-talk, \
            up/down choose a person, +/- their volume, q leave, ? the keys, / types a text \
            message to the room (Enter sends, Esc gives up), and : types a request as parley \
            ctl takes it (:volume bob 50). The roster shows who muted or deafened themselves or \
            was muted by a moderator, each member's loss, jitter and concealment, and the last \
            few messages; a narrow terminal drops whole columns, never part of a figure. \
            Without a terminal each message is a line. From a \
            script or a desktop hotkey, `parley ctl` reaches the call by its --name (else its room):
              parley ctl mute
              parley ctl ptt press; parley ctl ptt release
              parley ctl --call standup volume bob 50
              parley ctl say back in five minutes
              parley ctl status

            End-to-end encrypted rooms (invites made with `parley-relay token --e2ee`): \
            your voice is sealed with keys only the room's members hold, so the relay \
            forwards what it cannot hear. Your identity key is --identity (default \
            ~/.config/parley/identity, made on first use); the roster shows each \
            person's fingerprint, `parley ctl verify NAME` (v on the call screen) the \
            safety number you read aloud with them, and a person whose key changed is \
            refused until `parley ctl trust NAME`.
            """ + "\n\n" + CallExitStatus.helpText)

    @Argument(help: ArgumentHelp("The invite: parley://HOST:PORT/ROOM?token=…", valueName: "invite-url"))
    var invite: String?

    @Option(help: ArgumentHelp("The relay, without an invite.", valueName: "host:port"))
    var relay: String?

    @Option(help: ArgumentHelp("The room, without an invite.", valueName: "room"))
    var room: String?

    @Option(help: ArgumentHelp("The access token, without an invite (`parley-relay token` mints them).", valueName: "token"))
    var token: String?

    @Option(help: ArgumentHelp("The relay's public key (base64url), when the invite lacks it. A key that starts with - is given as --relay-key=KEY.", valueName: "key"))
    var relayKey: String?

    @Flag(help: "Talk to the relay unencrypted; only when the relay runs with --insecure too.")
    var insecure = false

    @Option(help: ArgumentHelp("How this client labels itself in its status and summary (default: your identity).", valueName: "name"))
    var name: String?

    @Option(help: ArgumentHelp("Microphone: alsa:DEVICE or a WAV file (any rate, mono or stereo).", valueName: "alsa:DEVICE|FILE.wav"))
    var input: String = "alsa:default"

    @Option(help: ArgumentHelp("Speaker: alsa:DEVICE or a WAV file to write.", valueName: "alsa:DEVICE|FILE.wav"))
    var output: String = "alsa:default"

    @Option(help: ArgumentHelp("Echo cancellation on what you send: on, off (headphones), or auto (on for a sound card, off for a WAV input).", valueName: "on|off|auto"))
    var aec: String = "auto"

    @Option(help: ArgumentHelp("Noise suppression on what you send.", valueName: "on|off"))
    var denoise: String = "on"

    @Option(help: ArgumentHelp(
        "Your voice's bitrate in kb/s (6–510), all of it on a clean network. While listeners report loss, each packet also repeats two earlier frames (about 3× the bandwidth), or in-band FEC takes a share of it when a listener's client is too old for that.",
        valueName: "kbps"))
    var bitrate: Double = 32

    @Option(help: ArgumentHelp("Leave after this many seconds.", valueName: "seconds"))
    var duration: Double?

    @Option(help: ArgumentHelp("Record the microphone as captured, unprocessed (WAV, 48 kHz mono).", valueName: "FILE.wav"))
    var recordRaw: String?

    @Option(help: ArgumentHelp("Record what is sent: the processed signal handed to the encoder.", valueName: "FILE.wav"))
    var recordSent: String?

    @Option(help: ArgumentHelp("Record each remote speaker, before the mix, on your playback timeline: one WAV per identity in DIR.", valueName: "DIR"))
    var recordReceived: String?

    @Option(help: ArgumentHelp("Write the call's figures as JSON when it ends.", valueName: "FILE"))
    var statsJson: String?

    @Option(help: ArgumentHelp("Seconds between status updates (on a terminal the line is redrawn; otherwise one line each).", valueName: "seconds"))
    var statusInterval: Double = 1

    @Flag(help: "No status line or notices; errors and the summary only.")
    var quiet = false

    @Option(help: ArgumentHelp(
        "Your identity for end-to-end encrypted rooms: a key file, made on first use (default ~/.config/parley/identity). Pinned keys of people you meet are kept beside it (known-keys).",
        valueName: "FILE"))
    var identity: String?

    // Diagnostics, for benchmarks and debugging; `parley call --help-hidden` shows them.

    @Option(help: ArgumentHelp(
        "Diagnostics: write every RTP packet sent and received (sequence, timestamp, CLOCK_MONOTONIC time, size, payload) as CSV.",
        valueName: "FILE.csv", visibility: .hidden))
    var packetTrace: String?

    @Option(help: ArgumentHelp(
        "Diagnostics: also send every RTP packet received from the others, opened, to these UDP ports on this machine (a second receiver, such as GStreamer, then plays exactly what this call got).",
        valueName: "127.0.0.1:PORT,…", visibility: .hidden))
    var copyReceivedRtp: String?

    func validate() throws {
        guard bitrate.isFinite, (6...510).contains(bitrate) else {
            throw ValidationError("--bitrate \(bitrate) is outside 6–510 kb/s; voice sounds good from 24, and 32 is the default.")
        }
        if let duration {
            guard duration.isFinite, duration > 0, duration <= 7 * 24 * 3_600 else {
                throw ValidationError("--duration \(duration) must be a number of seconds above 0 (at most a week).")
            }
        }
        guard statusInterval.isFinite, (0.1...3_600).contains(statusInterval) else {
            throw ValidationError("--status-interval \(statusInterval) must be between 0.1 and 3600 seconds.")
        }
        guard CallConfiguration.EchoCancellation(rawValue: aec) != nil else {
            throw ValidationError("--aec \(aec): use on, off (with headphones) or auto.")
        }
        guard denoise == "on" || denoise == "off" else { throw ValidationError("--denoise \(denoise): use on or off.") }
        if insecure, relayKey != nil {
            throw ValidationError("--insecure and --relay-key contradict each other: a relay key means the encrypted protocol.")
        }
        if let identity, identity.isEmpty || identity.hasSuffix("/") {
            throw ValidationError("--identity \(identity): give a file (made on first use), like ~/.config/parley/identity")
        }
        if let name, name.isEmpty || name.count > 64 || name.contains(where: { $0.isNewline }) {
            throw ValidationError("--name must be 1 to 64 characters on one line.")
        }
        // Here rather than in run(), so a mistake is reported with this command's usage.
        _ = try makeConfiguration()
    }

    func run() throws {
        var configuration = try makeConfiguration()
        do {
            configuration.endToEnd = try EndToEndIdentity.load(
                path: identity, token: configuration.token, environment: ProcessInfo.processInfo.environment,
                notice: { message in if !quiet { FileHandle.standardError.write(Data("parley call: \(message)\n".utf8)) } })
        } catch {
            Self.fail(error)
        }

        let console = ProxyConsole()
        let route = NoticeRoute()
        let session: CallSession
        do {
            session = try CallSession(configuration, notice: { message in
                guard !quiet else { return }
                if let terminal = route.terminal { terminal.printLine("parley call: \(message)") } else { console.printLine("parley call: \(message)") }
            }, onText: { message in
                // On a terminal the roster shows the last few; otherwise each is a line. Never
                // redrawn here: this is the network loop, and the figures are read on it.
                guard !quiet else { return }
                if let terminal = route.terminal { DispatchQueue.global().async { terminal.redraw() } } else { console.printLine(message.line) }
            })
        } catch {
            Self.fail(error)
        }
        // On a terminal: keys and the live roster. Otherwise (a log, a pipe) a status line.
        let terminal = !quiet && CallTerminal.canDraw ? CallTerminal(session: session) : nil
        route.terminal = terminal

        // Ctrl-C or SIGTERM: leave cleanly. A second Ctrl-C quits at once.
        let interrupts = InterruptCounter()
        let signals = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                if interrupts.increment() > 1 { Foundation.exit(130) }
                if !quiet { route.terminal?.printLine("parley call: leaving (Ctrl-C again to quit at once)…") ?? console.printLine("parley call: leaving (Ctrl-C again to quit at once)…") }
                session.stop()
            }
            source.resume()
            return source
        }
        var status: (any DispatchSourceTimer)?
        if !quiet {
            let timer = DispatchSource.makeTimerSource(queue: .global())
            // The roster redraws often enough for its level meters; a status line as asked.
            let interval = DispatchTimeInterval.milliseconds(terminal != nil ? min(250, Int(statusInterval * 1_000)) : Int(statusInterval * 1_000))
            timer.schedule(deadline: .now() + interval, repeating: interval)
            timer.setEventHandler {
                if let terminal { terminal.redraw() } else { console.showStatus(CallStatusLine.line(session.statistics())) }
            }
            timer.resume()
            status = timer
        }
        terminal?.start()

        let result = session.run()
        status?.cancel()
        signals.forEach { $0.cancel() }
        terminal?.finish()
        console.finish()
        let statistics = session.statistics()
        if let statsJson {
            do {
                try statistics.json().write(to: URL(fileURLWithPath: statsJson))
            } catch {
                Self.fail(CallError.cannotWriteOutput("--stats-json \(statsJson): cannot write it (\(error.localizedDescription))"))
            }
        }
        switch result {
        case .success:
            print(CallStatusLine.summary(statistics))
        case let .failure(error):
            if statistics.elapsedSeconds > 0 { print(CallStatusLine.summary(statistics)) }
            Self.fail(error)
        }
    }

    static func fail(_ error: CallError) -> Never {
        FileHandle.standardError.write(Data("parley call: error: \(error)\n".utf8))
        Foundation.exit(error.exitCode)
    }

    // MARK: Reading the flags

    func makeConfiguration() throws -> CallConfiguration {
        var host: String
        var port: Int
        var roomName: String
        var tokenText: String
        var inviteKey: String?
        if let invite {
            guard relay == nil, room == nil, token == nil else {
                throw ValidationError("give either an invite or --relay, --room and --token, not both.")
            }
            let url: InviteURL
            do {
                url = try InviteURL(parsing: invite)
            } catch {
                throw ValidationError("the invite cannot be read: \(Self.reason(error)). It looks like parley://relay.example.org:7800/room?token=…")
            }
            (host, port, roomName, tokenText) = (url.host, url.port, url.room, url.token)
            inviteKey = url.parameter("key")
        } else {
            guard let relay, let room, let token else {
                throw ValidationError("give the invite you were sent (parley://…), or all of --relay HOST:PORT, --room and --token.")
            }
            let endpoint: ProxyRunner.Endpoint
            do {
                endpoint = try ProxyRunner.Endpoint(parsing: relay, flag: "--relay")
            } catch {
                throw ValidationError(error.description)
            }
            if let problem = ParleyNames.problem(withRoom: room) {
                throw ValidationError("--room \(room): \(problem)")
            }
            guard !token.isEmpty else { throw ValidationError("--token is empty; `parley-relay token` mints one.") }
            (host, port, roomName, tokenText) = (endpoint.host, endpoint.port, room, token)
        }

        let security: RelayLink.Security
        let keyText = relayKey ?? inviteKey
        if let keyText {
            if insecure {
                throw ValidationError("the invite carries the relay's key, so the relay speaks the encrypted protocol; drop --insecure.")
            }
            if let relayKey, let inviteKey, relayKey != inviteKey {
                throw ValidationError("--relay-key differs from the key in the invite; use the invite's, or ask for a fresh invite.")
            }
            do {
                security = .secure(relayKey: try RelayKey.publicKey(fromText: keyText))
            } catch {
                throw ValidationError("\(relayKey != nil ? "--relay-key" : "the invite's key"): \(error)")
            }
        } else if insecure {
            security = .insecure
        } else {
            throw ValidationError("this invite has no relay key; use a fresh invite, or --insecure if both sides agree.")
        }

        var configuration = CallConfiguration(relayHost: host, relayPort: port, room: roomName, token: tokenText, security: security)
        configuration.name = name
        configuration.input = try Self.input(input)
        configuration.output = try Self.output(output)
        configuration.echoCancellation = CallConfiguration.EchoCancellation(rawValue: aec) ?? .auto
        configuration.denoise = denoise == "on"
        configuration.maximumBitrate = Int((bitrate * 1_000).rounded())
        configuration.durationSeconds = duration
        configuration.controlSocketPath = ControlSocketPath().socket(forCall: name ?? roomName)
        configuration.recordRawPath = recordRaw
        configuration.recordSentPath = recordSent
        configuration.recordReceivedDirectory = recordReceived
        configuration.packetTracePath = packetTrace
        if let copyReceivedRtp { configuration.receivedRTPCopies = try Self.localAddresses(copyReceivedRtp, relayHost: host) }
        return configuration
    }

    /// `--copy-received-rtp`: loopback addresses only, because the copies are the others'
    /// audio in the clear; and of the relay's family, because they leave by the same socket.
    static func localAddresses(_ text: String, relayHost: String) throws -> [SocketAddress] {
        let flag = "--copy-received-rtp"
        return try text.split(separator: ",", omittingEmptySubsequences: false).map { item in
            let endpoint: ProxyRunner.Endpoint
            do {
                endpoint = try ProxyRunner.Endpoint(parsing: String(item), flag: flag)
            } catch {
                throw ValidationError("\(error)")
            }
            let address: SocketAddress
            do {
                address = try SocketAddress(ipAddress: endpoint.host, port: endpoint.port)
            } catch {
                throw ValidationError("\(flag) \(item): give an IP address on this machine, like 127.0.0.1:\(endpoint.port)")
            }
            let loopback = endpoint.host == "::1" || (address.protocol == .inet && endpoint.host.hasPrefix("127."))
            guard loopback else {
                throw ValidationError("\(flag) \(item): the copies are unencrypted audio, so they may only go to this machine (127.0.0.1 or [::1])")
            }
            let relayIsIPv6 = relayHost.contains(":")
            guard (address.protocol == .inet6) == relayIsIPv6 else {
                throw ValidationError("\(flag) \(item): use \(relayIsIPv6 ? "[::1]" : "127.0.0.1"), the relay's address family (the copies leave by its socket)")
            }
            return address
        }
    }

    static func input(_ text: String) throws -> CallConfiguration.Input {
        if text.hasPrefix("alsa:") {
            let device = String(text.dropFirst(5))
            guard !device.isEmpty else { throw ValidationError("--input alsa: needs a device name, like alsa:default (`parley devices` lists them).") }
            return .alsa(device: device)
        }
        guard !text.isEmpty else { throw ValidationError("--input is empty; give alsa:DEVICE or a WAV file.") }
        if !FileManager.default.fileExists(atPath: text) && !text.lowercased().hasSuffix(".wav") {
            throw ValidationError("--input \(text): no such file; for a sound device write alsa:\(text).")
        }
        return .wav(path: text)
    }

    static func output(_ text: String) throws -> CallConfiguration.Output {
        if text.hasPrefix("alsa:") {
            let device = String(text.dropFirst(5))
            guard !device.isEmpty else { throw ValidationError("--output alsa: needs a device name, like alsa:default (`parley devices` lists them).") }
            return .alsa(device: device)
        }
        guard !text.isEmpty else { throw ValidationError("--output is empty; give alsa:DEVICE or a WAV file to write.") }
        guard text.lowercased().hasSuffix(".wav") else {
            throw ValidationError("--output \(text): give a file name ending in .wav, or alsa:DEVICE for a sound device.")
        }
        return .wav(path: text)
    }

    private static func reason(_ error: WireError) -> String {
        if case let .malformed(_, reason) = error { return reason }
        return "\(error)"
    }
}

/// Where notices go: above the roster once there is one, else the console.
private final class NoticeRoute: @unchecked Sendable {
    // @unchecked: set once, before the call starts and any notice can come.
    var terminal: CallTerminal?
}

/// Counts Ctrl-Cs across the signal handler's invocations.
private final class InterruptCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() -> Int { lock.withLock { count += 1; return count } }
}
