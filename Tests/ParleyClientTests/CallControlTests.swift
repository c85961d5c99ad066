import Foundation
import ParleyBasics
@testable import ParleyClient
import ParleyWire
import Testing

/// The requests a person or a script sends a running call, as words, and the state they set.
@Suite("Call controls: requests and what they set")
struct CallControlTests {
    @Test func everyRequestReadsBackFromItsOwnLine() throws {
        let controls: [CallControl] = [
            .mute, .unmute, .deafen, .undeafen, .pushToTalkMode(true), .pushToTalkMode(false),
            .pushToTalkPress, .pushToTalkRelease, .volume(person: "bob", percent: 50), .say("back in  5 — ok?"), .leave, .status,
        ]
        for control in controls { #expect(try CallControl(parsing: control.line) == control) }
        #expect(try CallControl(parsing: "  VOLUME  bob   150% ") == .volume(person: "bob", percent: 150), "case, spaces and a % sign are forgiven")
    }

    @Test func aRequestThatCannotBeReadSaysWhatWouldHaveBeenRight() {
        let cases: [(String, String)] = [
            ("", "empty"),
            ("shout", "not a request"),
            ("mute now", "takes nothing"),
            ("ptt hold", "on, off, press or release"),
            ("volume bob", "a person and a percentage"),
            ("volume bob 201", "0 (silent) to 200"),
            ("volume bob -5", "0 (silent) to 200"),
            ("volume bob loud", "whole percentage"),
            ("say", "'say' takes the message after it, like: say back in five minutes"),
            ("say  \t ", "takes the message after it"),
            ("say " + String(repeating: "x", count: 501), "501 bytes; the most is 500"),
            ("say a\u{1B}[2Jb", "control character or line break (U+001B)"),
        ]
        for (line, expected) in cases {
            do {
                _ = try CallControl(parsing: line)
                Issue.record("'\(line)' was accepted")
            } catch {
                #expect(error.description.contains(expected), "'\(line)': \(error)")
            }
        }
    }

    @Test func anyBytesAreReadOrRefusedNeverTrapped() {
        var random = SplitMix64(seed: 0xC0_17)
        let words = ["mute", "ptt", "press", "volume", "bob", "50", "%", " ", "\t", "\u{0}", "é", "999999999999999999999", "-"]
        for _ in 0..<5_000 {
            var line = ""
            for _ in 0..<Int.random(in: 0...6, using: &random) {
                if Bool.random(using: &random) {
                    line += words[Int.random(in: 0..<words.count, using: &random)]
                } else {
                    let bytes = (0..<Int.random(in: 0...8, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                    line += String(decoding: bytes, as: UTF8.self)
                }
            }
            if let control = try? CallControl(parsing: line) {
                #expect((try? CallControl(parsing: control.line)) == control)
            }
        }
    }

    @Test func muteDeafenAndPushToTalkDecideWhetherTheMicrophoneGoesOut() {
        var state = ControlState()
        #expect(state.transmits)
        #expect(state.apply(.mute) == "muted" && !state.transmits)
        _ = state.apply(.unmute)
        #expect(state.transmits)
        _ = state.apply(.mute)
        _ = state.apply(.deafen)
        #expect(!state.transmits && state.summary == "deafened")
        _ = state.apply(.undeafen)
        #expect(!state.transmits && state.summary == "muted", "undeafening gives back the mute one had")
        _ = state.apply(.unmute)
        _ = state.apply(.pushToTalkMode(true))
        #expect(!state.transmits, "push-to-talk: silent until pressed")
        _ = state.apply(.pushToTalkPress)
        #expect(state.transmits)
        _ = state.apply(.pushToTalkRelease)
        #expect(!state.transmits)
        _ = state.apply(.pushToTalkMode(false))
        #expect(state.transmits)
    }

    /// What the room is told: muted whenever the microphone does not go out, so a
    /// push-to-talk member who is not talking shows muted to the others.
    @Test func theOthersSeeMutedWheneverTheMicrophoneIsClosedAndDeafenedAsSuch() {
        var state = ControlState()
        #expect(state.memberState == [])
        _ = state.apply(.mute)
        #expect(state.memberState == .muted)
        _ = state.apply(.deafen)
        #expect(state.memberState == [.muted, .deafened])
        _ = state.apply(.undeafen)
        _ = state.apply(.unmute)
        _ = state.apply(.pushToTalkMode(true))
        #expect(state.memberState == .muted, "push-to-talk, not talking")
        _ = state.apply(.pushToTalkPress)
        #expect(state.memberState == [])
    }

    @Test func aHotkeysPressAndReleaseAloneMeanPushToTalk() {
        var state = ControlState()
        _ = state.apply(.pushToTalkPress)
        #expect(state.transmits && state.pushToTalk)
        _ = state.apply(.pushToTalkRelease)
        #expect(!state.transmits, "after the release the microphone stays closed")
    }

    @Test func aSocketNameIsOneSafeFileNameWhateverTheCallsName() {
        let paths = ControlSocketPath(directory: "/run/user/1000/parley")
        #expect(paths.socket(forCall: "standup") == "/run/user/1000/parley/standup.sock")
        #expect(paths.socket(forCall: "../../etc/x y") == "/run/user/1000/parley/_._.._etc_x_y.sock")
        #expect(ControlSocketPath(environment: ["XDG_RUNTIME_DIR": "/run/user/7"], userID: 7).directory == "/run/user/7/parley")
        #expect(ControlSocketPath(environment: [:], userID: 7).directory == "/tmp/parley-7")
        #expect(ControlSocketPath(environment: ["XDG_RUNTIME_DIR": "relative"], userID: 7).directory == "/tmp/parley-7")
    }
}
