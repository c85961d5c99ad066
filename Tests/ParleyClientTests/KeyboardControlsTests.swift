import Foundation
@testable import ParleyClient
import Testing

/// The keys of a call on a terminal, and the roster they act on.
@Suite("Keys and the live roster")
struct KeyboardControlsTests {
    @Test func keysAndArrowsAreReadEvenWhenAnEscapeSequenceArrivesInPieces() {
        var reader = CallKey.Reader()
        #expect(reader.keys(from: Array("md t+-q?".utf8)) == [.mute, .deafen, .talk, .pushToTalkMode, .louder, .quieter, .leave, .help])
        #expect(reader.keys(from: [0x1B, 0x5B]) == [], "half an arrow")
        #expect(reader.keys(from: [0x41, 0x1B, 0x5B, 0x42]) == [.up, .down])
        #expect(reader.keys(from: [0x1B, 0x5B, 0x31, 0x3B, 0x35, 0x43, 0x6D]) == [.mute], "an unknown sequence is skipped whole")
        #expect(reader.keys(from: Array("xyz\r\n".utf8)) == [], "other keys do nothing")
    }

    @Test func aColonStartsATypedRequestThatEnterSendsAndEscapeAbandons() {
        var reader = CallKey.Reader()
        #expect(reader.keys(from: Array(":volume bob 5".utf8)) == [], "letters typed are not keys")
        #expect(reader.typing == "volume bob 5")
        #expect(reader.keys(from: Array("0\r".utf8)) == [.command("volume bob 50")])
        #expect(reader.typing == nil)
        #expect(reader.keys(from: Array(":mute".utf8) + [0x1B] + Array("m".utf8)) == [.mute], "escape gives up; m is a key again")
        #expect(reader.keys(from: Array(":é".utf8) + [0x7F] + Array("x\n".utf8)) == [.command("x")], "backspace removes a whole character")
        #expect(reader.keys(from: [UInt8](repeating: 0x61, count: 2_000).prefix(1) + [0x3A] + [UInt8](repeating: 0x61, count: 2_000) + [0x0A])
            == [.command(String(repeating: "a", count: CallControl.maximumLineBytes))], "a typed request is as long as the socket allows, no longer")
        var keys = KeyboardControls()
        #expect(keys.requests(for: .command("ptt press"), state: ControlState(), others: [], volume: { _ in 100 }) == [.pushToTalkPress])
        #expect(keys.requests(for: .command("shout"), state: ControlState(), others: [], volume: { _ in 100 }) == [])
    }

    @Test func mDTogglesMuteAndDeafenAndSpaceLatchesPushToTalk() {
        var keys = KeyboardControls()
        var state = ControlState()
        func press(_ key: CallKey) {
            for request in keys.requests(for: key, state: state, others: [], volume: { _ in 100 }) { _ = state.apply(request) }
        }
        press(.mute)
        #expect(state.muted)
        press(.mute)
        #expect(!state.muted)
        press(.deafen)
        #expect(state.deafened && !state.transmits)
        press(.deafen)
        press(.talk)
        #expect(state.pushToTalk && !state.transmits, "space first turns push-to-talk on")
        press(.talk)
        #expect(state.transmits, "then talks")
        press(.talk)
        #expect(!state.transmits, "and again stops")
        press(.pushToTalkMode)
        #expect(!state.pushToTalk && state.transmits)
    }

    @Test func arrowsChooseAPersonAndPlusMinusStepTheirVolumeWithinZeroToTwoHundred() {
        var keys = KeyboardControls()
        var volumes = ["bob": 100, "carol": 10]
        func press(_ key: CallKey) -> [CallControl] {
            let requests = keys.requests(for: key, state: ControlState(), others: ["bob", "carol"], volume: { volumes[$0] ?? 100 })
            for case let .volume(person, percent) in requests { volumes[person] = percent }
            return requests
        }
        #expect(press(.louder) == [.volume(person: "bob", percent: 110)], "the first person is chosen to begin with")
        _ = press(.down)
        #expect(keys.selected == "carol")
        _ = press(.quieter)
        #expect(press(.quieter) == [.volume(person: "carol", percent: 0)], "never below 0")
        _ = press(.down)
        #expect(keys.selected == "bob", "the choice wraps around")
        for _ in 0..<20 { _ = press(.louder) }
        #expect(volumes["bob"] == 200, "never above 200")
        #expect(keys.requests(for: .leave, state: ControlState(), others: [], volume: { _ in 100 }) == [.leave])
    }

    static func statistics() -> CallStatistics {
        func speaker(_ identity: String, level: Double, speaking: Bool, volume: Int) -> CallStatistics.Speaker {
            CallStatistics.Speaker(
                identity: identity, ssrc: 1, packetsReceived: 100, packetsLost: 2, lossPercent: 2, fecRecoveredFrames: 0, fecRecoveredPercent: 0,
                concealedFrames: 1, concealedPercent: 0.5, underruns: 0, latePackets: 0, duplicatePackets: 0, jitterBufferDelayMilliseconds: 62,
                jitterBufferTargetMilliseconds: 60, networkJitterMilliseconds: 3, restarts: 0, audioFrames: 200, receiving: true,
                volumePercent: volume, levelDecibels: level, speakingNow: speaking)
        }
        var controls = ControlState()
        _ = controls.apply(.mute)
        return CallStatistics(
            name: "alice", identity: "alice", room: "standup", phase: .inCall, elapsedSeconds: 83, members: ["alice", "bob", "carol", "dave"],
            speaking: ["bob"], roundTripMilliseconds: 12, lossUpPercent: 0, lossUpTotalPercent: 0, lossDownPercent: 1, jitterBufferDelayMilliseconds: 62,
            concealedPercent: 0.5, bitrate: 32_000, expectedLossPercent: 0, captureXruns: 0, playbackXruns: 1, rejoins: 0, packetsSent: 10, bytesSent: 1_000,
            speakers: [speaker("bob", level: -12, speaking: true, volume: 50), speaker("carol", level: -70, speaking: false, volume: 0)],
            controls: controls)
    }

    @Test func theRosterShowsEachPersonsMeterVolumeAndFiguresAndYourOwnState() {
        let lines = RosterView.lines(Self.statistics(), selected: "carol", showHelp: false, width: 200)
        #expect(lines[0] == "alice · 1:23 in standup · you: MUTED · rtt 12 ms · loss up 0.0% · 32 kb/s · xruns 1")
        #expect(lines[1] == "    bob    [■■■■■■■■  ]  speaking  vol  50%    loss 2.0%  jitter 3 ms  jb 62 ms  concealed 0.5%")
        #expect(lines[2] == "  ▸ carol  [          ]  quiet     muted here  loss 2.0%  jitter 3 ms  jb 62 ms  concealed 0.5%")
        #expect(lines[3] == "    dave   [          ]  silent    vol 100%", "a member not heard yet")
        #expect(lines[4] == "? keys · / message")
        #expect(RosterView.lines(Self.statistics(), selected: nil, showHelp: true, width: 200).last == CallKey.helpLine)
        let narrow = RosterView.lines(Self.statistics(), selected: nil, showHelp: true, width: 60)
        #expect(narrow.suffix(4) == ["m mute · d deafen · t push-to-talk on/off · space talk/stop", "↑↓ choose a person · +/- their volume",
                                     "v their safety number · q leave · /message to the room", ":request (as parley ctl) · ? help"],
                "the keys wrap, none is cut")
        #expect(RosterView.lines(Self.statistics(), selected: nil, showHelp: false, width: 30).allSatisfy { $0.count <= 30 })
        #expect(RosterView.lines(Self.statistics(), selected: nil, showHelp: false, typing: "volume bo").last == ":volume bo", "what is typed shows under the roster")
        #expect(RosterView.lines(Self.statistics(), selected: nil, showHelp: false, typing: "back in 5", prompt: "/", bytesLeft: 491).last
            == "/back in 5 (491 bytes left)")
    }

    /// A narrower terminal drops whole columns, the least important first, the same ones on
    /// every member's line; a figure is never cut, and a name is shortened only last.
    @Test func aNarrowTerminalDropsWholeColumnsLeastImportantFirst() {
        var statistics = Self.statistics()
        statistics.serverMuted = ["dave"]
        let columns = ["[", "speaking", "vol", "loss", "jitter", "jb", "concealed"]
        var shownBefore = Set(columns)
        for width in [120, 96, 80, 72, 60, 48, 40, 30] {
            let lines = RosterView.lines(statistics, selected: nil, showHelp: false, width: width)
            #expect(lines.allSatisfy { RosterView.displayWidth($0) <= width }, "\(width): \(lines)")
            let bob = lines[1]
            let shown = Set(columns.filter { bob.contains($0) })
            #expect(shown.isSubset(of: shownBefore), "\(width) columns show no field 'wider' ones dropped: \(bob)")
            shownBefore = shown
            for figure in ["loss", "jitter", "jb", "concealed"] where bob.contains(figure + " ") {
                #expect(bob.contains(try! Regex(figure + #" \d+(\.\d)?(%| ms)"#)), "\(figure) is whole at \(width): \(bob)")
            }
            #expect(lines[3].contains("MUTED BY MODERATOR") || width < 40, "why dave is silent stays: \(lines[3])")
            #expect(!lines[0].hasSuffix("·") && !lines[0].contains("rtt ·"), "the call's line is whole fields: \(lines[0])")
        }
        let sixty = RosterView.lines(statistics, selected: nil, showHelp: false, width: 60)
        #expect(sixty[1].contains("speaking") && sixty[1].contains("loss 2.0%") && !sixty[1].contains("jb "), "\(sixty[1])")
    }

    @Test func aTypedLineStopsAtItsLimitAtAWholeCharacter() {
        var reader = CallKey.Reader()
        _ = reader.keys(from: Array("/".utf8))
        _ = reader.keys(from: Array(String(repeating: "x", count: 498).utf8))
        #expect(reader.bytesLeft == 2)
        _ = reader.keys(from: Array("€".utf8))  // three bytes do not fit in two
        #expect(reader.typing?.count == 498 && reader.bytesLeft == 2, "a character that would cross the limit is not typed at all")
        _ = reader.keys(from: Array("éx".utf8))
        #expect(reader.bytesLeft == 0 && reader.typing?.hasSuffix("é") == true)
        let keys = reader.keys(from: [0x0D])
        #expect(keys == [.message(String(repeating: "x", count: 498) + "é")], "what is sent is what was shown, within the limit")
        var request = CallKey.Reader()
        _ = request.keys(from: Array(":".utf8))
        #expect(request.bytesLeft == CallControl.maximumLineBytes)
        let line = RosterView.lines(Self.statistics(), selected: nil, showHelp: false, typing: String(repeating: "y", count: 300), prompt: "/",
                                    bytesLeft: 200, width: 80).last ?? ""
        #expect(line.hasPrefix("/…") && line.hasSuffix("yy (200 bytes left)") && line.count <= 80, "the end of a long line and the count stay in view: \(line)")
    }

    @Test func othersWhoMutedOrDeafenedThemselvesShowSoAndTheLastMessagesShowUnderTheMembers() {
        var statistics = Self.statistics()
        statistics.mutedMembers = ["alice", "carol", "dave"]
        statistics.deafenedMembers = ["dave"]
        var texts: [RoomText] = []
        for index in 1...6 {
            let fromBob = index % 2 == 0
            texts.append(RoomText(sender: fromBob ? "bob" : "alice", text: "line \(index)", atSeconds: Double(60 + index), outgoing: !fromBob))
        }
        statistics.texts = texts
        statistics.texts?.append(RoomText(sender: "bob\u{1B}[2J", text: "\u{1B}[31mred\u{202E}evil\r\nforged", atSeconds: 70, outgoing: false))
        let lines = RosterView.lines(statistics, selected: "carol", showHelp: false, width: 200)
        #expect(lines[1].hasPrefix("    bob    [■■■■■■■■  ]  speaking"), "bob did not mute: \(lines[1])")
        #expect(lines[2].hasPrefix("  ▸ carol  [          ]  MUTED     muted here"), "carol muted herself (and is turned off here too): \(lines[2])")
        #expect(lines[3] == "    dave   [          ]  DEAFENED  vol 100%")
        #expect(Array(lines[4...7]) == [
            "  [1:04] bob: line 4", "  [1:05] alice: line 5", "  [1:06] bob: line 6",
            "  [1:10] bob\\u{1b}[2J: \\u{1b}[31mred\\u{202e}evil\\u{d}\\u{a}forged",
        ], "the last \(RosterView.textLines) messages, escapes and overrides shown, never acted on")
        let forbidden: Set<Unicode.Scalar> = ["\u{1B}", "\u{202E}", "\r", "\n"]
        #expect(lines.allSatisfy { line in !line.unicodeScalars.contains { forbidden.contains($0) } })
        let status = CallStatusLine.line(statistics)
        #expect(status.contains("muted: carol · deafened: dave"), "the status line names the others who muted (not ourselves): \(status)")
    }

    @Test func slashTypesAMessageForTheRoomAndEscapeGivesItUp() {
        var reader = CallKey.Reader()
        #expect(reader.keys(from: Array("/back in 5".utf8)).isEmpty)
        #expect(reader.typing == "back in 5" && reader.prompt == "/")
        #expect(reader.keys(from: Array("\r".utf8)) == [.message("back in 5")])
        #expect(reader.keys(from: Array("/oops".utf8) + [0x1B] + Array("m".utf8)) == [.mute], "Escape gives the message up; keys act again")
        #expect(reader.keys(from: Array(":say hi\r".utf8)) == [.command("say hi")])
        var keys = KeyboardControls()
        #expect(keys.requests(for: .message("hi all"), state: ControlState(), others: [], volume: { _ in 100 }) == [.say("hi all")])
    }
}
