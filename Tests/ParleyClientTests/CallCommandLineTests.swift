import Foundation
import Testing

/// `parley call`'s diagnostics as a person meets them: the real binary, built beside this
/// test bundle. They stay out of the everyday help, and the copy of what others say never
/// leaves the machine.
@Suite("parley call's diagnostics on the command line")
struct CallCommandLineTests {
    static var parley: URL {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("parley")
    }

    /// Runs `parley ARGUMENTS`: its status, and all it printed.
    static func run(_ arguments: [String], environment: [String: String]? = nil) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = parley
        process.arguments = arguments
        if let environment { process.environment = environment }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    static func call(_ arguments: [String]) throws -> (status: Int32, output: String) { try run(["call"] + arguments) }

    static let relay = ["--relay", "127.0.0.1:9", "--room", "r", "--token", "t", "--insecure"]

    @Test func theDiagnosticsAreListedByHelpHiddenOnly() throws {
        let help = try Self.call(["--help"])
        #expect(help.status == 0)
        #expect(!help.output.contains("--packet-trace"))
        #expect(!help.output.contains("--copy-received-rtp"))
        let hidden = try Self.call(["--help-hidden"])
        #expect(hidden.output.contains("--packet-trace"))
        #expect(hidden.output.contains("--copy-received-rtp"))
    }

    @Test func copiesOfWhatOthersSayMayOnlyGoToThisMachine() throws {
        let elsewhere = try Self.call(Self.relay + ["--copy-received-rtp", "127.0.0.1:5004,192.0.2.7:5004"])
        #expect(elsewhere.status == 2)
        #expect(elsewhere.output.contains("--copy-received-rtp 192.0.2.7:5004: the copies are unencrypted audio, so they may only go to this machine"))
        let named = try Self.call(Self.relay + ["--copy-received-rtp", "localhost:5004"])
        #expect(named.status == 2)
        #expect(named.output.contains("give an IP address on this machine, like 127.0.0.1:5004"))
        let portless = try Self.call(Self.relay + ["--copy-received-rtp", "127.0.0.1"])
        #expect(portless.status == 2)
        #expect(portless.output.contains("give a host and a port"))
        let family = try Self.call(Self.relay + ["--copy-received-rtp", "[::1]:5004"])
        #expect(family.status == 2)
        #expect(family.output.contains("use 127.0.0.1, the relay's address family"))
    }

    @Test func helpShowsTheKeysOfACallAndHowToDriveItWithCtl() throws {
        let help = try Self.call(["--help"])
        #expect(help.output.contains("m mute, d deafen, t push-to-talk") && help.output.contains("parley ctl --call standup volume bob 50"))
        let (status, ctl) = try Self.run(["ctl", "--help"])
        #expect(status == 0)
        #expect(ctl.contains("ptt press, ptt release") && ctl.contains("parley ctl status"), "\(ctl)")
        #expect(ctl.contains("say TEXT") && ctl.contains("line of at most 500 bytes, at most 5 every 5 s"), "\(ctl)")
        let words = help.output.split(whereSeparator: \.isWhitespace).joined(separator: " ")  // as wrapped for the terminal
        #expect(words.contains("/ types a text message to the room") && help.output.contains("parley ctl say back in five minutes"))
    }

    @Test func aMessageTooLongOrEmptyIsRefusedByCtlBeforeItReachesTheCall() throws {
        for (words, expected) in [
            (["say", String(repeating: "é", count: 251)], "the message is 502 bytes; the most is 500 bytes of UTF-8"),
            (["say"], "'say' takes the message after it, like: say back in five minutes"),
        ] {
            let (status, output) = try Self.run(["ctl"] + words, environment: ["XDG_RUNTIME_DIR": "/nonexistent", "PATH": "/usr/bin:/bin"])
            #expect(status == 2 && output.contains(expected), "\(output)")
        }
    }
}
