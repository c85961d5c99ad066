import ArgumentParser
import Foundation
import ParleyClient

/// `parley ctl`: drive a running call from a script or a desktop hotkey.
struct CtlCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ctl",
        abstract: "Control a running call: mute, push-to-talk, volumes, messages, leave, status.",
        discussion: """
            Talks to a `parley call` on this machine through its control socket \
            ($XDG_RUNTIME_DIR/parley/NAME.sock, else /tmp/parley-UID/NAME.sock; NAME is the \
            call's --name, else its room). With one call running, --call may be left out.

            Requests:
              mute, unmute            stop or resume sending your microphone
              deafen, undeafen        hear nothing and send nothing, or back as you were
              ptt press, ptt release  push-to-talk: send only between press and release
              ptt on, ptt off         push-to-talk mode on (silent until pressed) or off
              volume PERSON PERCENT   PERSON's loudness here, 0 (silent) to 200
              say TEXT                a text message to everyone else in the room: one
                                      line of at most 500 bytes, at most 5 every 5 s
              leave                   leave the call
              verify [PERSON]         end-to-end encrypted rooms: the safety number
                                      you share with PERSON (or everyone), to read
                                      aloud to each other, and their fingerprint
              trust PERSON            accept PERSON's changed identity key, once
                                      you compared the safety number
              status                  the call's figures as JSON: members, who is muted
                                      or deafened, speaking, the room's messages, and
                                      per speaker loss, jitter, jitter buffer and
                                      concealment; rtt, bitrate, xruns

            For moderators (a token minted with `parley-relay token --moderator`; the \
            relay refuses others):
              server-mute PERSON      the relay drops PERSON's audio for everyone until
                                      server-unmute
              server-unmute PERSON
              kick PERSON [--for DURATION] [--reason TEXT]
                                      remove PERSON; they cannot rejoin for DURATION
                                      (default 5m, at most 7d)
              close-room [--reason TEXT]
                                      remove everyone (you too) and close the room

            Examples:
              parley ctl mute
              parley ctl --call standup volume bob 50
              parley ctl ptt press; sleep 2; parley ctl ptt release
              parley ctl say "back in five minutes"
              parley ctl status | jq '.speakers[] | {identity, lossPercent}'
              parley ctl kick bob --for 10m --reason "shouting over everyone"
            """ + "\n\n" + CtlExitStatus.helpText)

    @Option(help: ArgumentHelp("The call to control, by its --name (needed when several run).", valueName: "name"))
    var call: String?

    // Captured as given, so a request's own options (kick's --for and --reason) reach it.
    @Argument(parsing: .allUnrecognized, help: ArgumentHelp("The request and its values.", valueName: "request"))
    var request: [String] = []

    func validate() throws {
        do {
            _ = try CallControl(parsing: request.joined(separator: " "))
        } catch {
            throw ValidationError("\(error)")
        }
    }

    func run() throws {
        let control = try CallControl(parsing: request.joined(separator: " "))
        let reply: CallControlReply
        do {
            let path = try ControlSocketPath().resolve(call: call)
            reply = try ControlClient.send(control, to: path)
        } catch {
            FileHandle.standardError.write(Data("parley ctl: \(error)\n".utf8))
            if case .whichCall = error { throw ExitCode(CtlExitStatus.whichCall.rawValue) }
            throw ExitCode(CtlExitStatus.noCall.rawValue)
        }
        guard reply.ok else {
            FileHandle.standardError.write(Data("parley ctl: \(reply.error ?? "refused")\n".utf8))
            throw ExitCode(CtlExitStatus.refused.rawValue)
        }
        if let status = reply.status {
            print(String(decoding: try status.json(), as: UTF8.self))
        } else if let message = reply.message {
            print(message)
        }
    }
}
