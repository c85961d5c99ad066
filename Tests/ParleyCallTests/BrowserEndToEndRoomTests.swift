import Foundation
import Logging
import ParleyAdmin
import ParleyAudio
import ParleyBasics
@testable import ParleyClient
import ParleyE2EE
import ParleyRelay
import Synchronization
import Testing

/// The page in an end-to-end encrypted room as the people in it live it, in Debian's headless
/// Chromium beside `parley call`s: a word said before the talker's key reached the page is
/// still heard; a departed member's keys are forgotten 10 s after they left, and one who comes
/// back within that is heard throughout; a changed key is shown and nothing of it plays until
/// the person accepts it; a sender who gave its key to a room the page does not see is named.
/// What is asserted is what the person notices: the audio the page plays (each voice's energy,
/// from `getStats()`), what `parley` records of the page, and the words on the page.
@Suite(.serialized)
struct BrowserEndToEndRoomTests {
    static let chromium = BrowserCallTests.chromium

    /// Ada's page joined to an end-to-end encrypted room, and the room.
    struct PageInRoom: @unchecked Sendable {
        let room: CallRoom
        let web: BrowserWebServer
        let page: ChromiumDevTools

        static func open(_ name: String, speech: String) async throws -> PageInRoom? {
            let room = try await CallRoom(room: name, endToEnd: true, acceptsBrowsers: true)
            var logger = Logger(label: "parley-browser-e2ee-room-test-web")
            logger.logLevel = .error
            let web = try BrowserWebServer.start(serving: room.relay, at: HostAndPort(host: "127.0.0.1", port: 0), logger: logger)
            let page = try ChromiumDevTools(
                chromium: chromium!, url: "http://127.0.0.1:\(web.localAddress!.port!)/join#token=\(room.token("ada"))&stats=1",
                speech: speech, directory: room.directory)
            let opened = PageInRoom(room: room, web: web, page: page)
            try page.attach()
            let joined = try page.waitFor("document.getElementById('mute').disabled === false", seconds: 45)
            #expect(joined, "the page never connected; it says \(page.shown("#status")); Chromium's log:\n\(page.logTail())")
            guard joined else {
                await opened.close()
                return nil
            }
            return opened
        }

        func close() async {
            page.stop()
            web.close()
            await room.close()
        }

        /// The page's end-to-end state and its worker's counts (`parleyEndToEnd()`).
        func endToEnd() -> [String: Any] {
            guard let text = (try? page.evaluate("parleyEndToEnd().then(JSON.stringify)")) as? String,
                  let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else { return [:] }
            return object
        }

        func frames() -> [String: Any] { endToEnd()["frames"] as? [String: Any] ?? [:] }

        /// The audio energy the page has played of each member's voice so far (`parleyVoices()`).
        func energies() -> [String: Double] {
            guard let text = (try? page.evaluate("parleyVoices().then(JSON.stringify)")) as? String,
                  let voices = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]] else { return [:] }
            var energies: [String: Double] = [:]
            for voice in voices {
                guard let identity = voice["identity"] as? String, let energy = ChromiumDevTools.number(voice["totalAudioEnergy"]) else { continue }
                energies[identity, default: 0] += energy
            }
            return energies
        }

        /// What the page shows on `identity`'s roster row about their key.
        func keyRow(of identity: String) -> String {
            (try? page.evaluate("""
                (() => { for (const item of document.querySelectorAll('#roster li')) if ((item.querySelector('.who') || {}).textContent === \(ChromiumDevTools.quoted(identity)))
                  return (item.querySelector('.keys') || {}).textContent || ''; return ''; })()
                """)) as? String ?? ""
        }
    }

    /// Polls `read` every 200 ms for `seconds`, keeping each name's largest figure (a voice's
    /// figures go with it when the member leaves).
    static func peaks(for seconds: Double, _ read: () -> [String: Double]) async throws -> [String: Double] {
        var peaks: [String: Double] = [:]
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            for (name, value) in read() { peaks[name] = max(peaks[name] ?? 0, value) }
            try await Task.sleep(for: .milliseconds(200))
        }
        return peaks
    }

    /// A WAV of 0.3 s of silence, then the loudest 0.6 s of `track`, then `silence` seconds.
    static func burst(of track: [Float], silence: Double, at path: String) throws -> String {
        let window = 48_000 * 6 / 10, step = 480
        var best = 0, bestEnergy: Float = -1
        for start in stride(from: 0, to: track.count - window, by: step) {
            let energy = track[start..<start + window].reduce(0) { $0 + $1 * $1 }
            if energy > bestEnergy { (best, bestEnergy) = (start, energy) }
        }
        let samples = [Float](repeating: 0, count: 48_000 * 3 / 10) + track[best..<best + window]
            + [Float](repeating: 0, count: Int(silence * 48_000))
        try WAVAudio(sampleRate: 48_000, samples: samples).write(to: path)
        return path
    }

    /// Holds back the keys the page is sent (the `mediaKeys` events) for `milliseconds`, as a
    /// slow control path would, before the page opens them.
    static func delayKeys(on page: ChromiumDevTools, milliseconds: Int) throws {
        _ = try page.evaluate("""
            (() => { const original = EndToEnd.prototype.received;
                     e2ee.received = function (entries) { setTimeout(() => original.call(this, entries), \(milliseconds)); }; return true; })()
            """)
    }

    /// Cy says one word with her key on time; then bob says the same word while his key takes
    /// 0.9 s longer to reach the page than his frames: the page holds his frames and plays them
    /// when the key comes, so it plays about as much of bob's word as of cy's (a page that
    /// dropped them would play nothing of it: the word is over before the key comes).
    @Test(.enabled(if: chromium != nil, "Debian's chromium is not installed: run Scripts/bootstrap (CI does), or apt-get install chromium"),
          .timeLimit(.minutes(10)))
    func aWordSaidBeforeTheTalkersKeyReachedThePageIsHeard() async throws {
        let conversation = try Conversation.standard.get()
        try await CallSlots.shared.withSlot(2) {
            guard let call = try await PageInRoom.open("browser-e2ee-early", speech: conversation.path(of: "ada")) else { return }
            let word = try Self.burst(of: conversation.tracks["bob"]!, silence: 3.5, at: call.room.directory + "/word.wav")
            let heard = Mutex<[String: Double]>([:])
            let onTime = try await CallOutcome.run(
                ["cy": call.room.configuration(for: "cy", input: .wav(path: word), durationSeconds: 4.5)],
                whileRunning: { let peaks = try await Self.peaks(for: 4.2) { call.energies() }; heard.withLock { $0.merge(peaks) { max($0, $1) } } })
            try Self.delayKeys(on: call.page, milliseconds: 900)
            let late = try await CallOutcome.run(
                ["bob": call.room.configuration(for: "bob", input: .wav(path: word), durationSeconds: 4.5)],
                whileRunning: { let peaks = try await Self.peaks(for: 4.2) { call.energies() }; heard.withLock { $0.merge(peaks) { max($0, $1) } } })
            let frames = call.frames()
            await call.close()
            for (talker, outcome) in [("cy", onTime), ("bob", late)] {
                if case let .failure(error)? = outcome.results[talker] { Issue.record("\(talker)'s call failed: \(error)") }
            }
            let cy = heard.withLock { $0["cy"] } ?? 0
            let bob = heard.withLock { $0["bob"] } ?? 0
            print("browser e2ee early frames: the page played energy \(cy) of cy's word (key on time), \(bob) of bob's (key 0.9 s late); worker \(frames)")
            #expect(cy > 0, "the page played nothing of cy's word with her key on time")
            #expect(bob > 0.6 * cy, "the page played \(bob) of bob's word, said before his key came, against \(cy) of cy's")
            #expect((frames["openedLate"] as? Int ?? 0) >= 20, "the page's worker opened \(frames["openedLate"] ?? 0) held frames")
            #expect(frames["holding"] as? Int == 0, "frames still held after the call: \(frames)")
        }
    }

    /// The three talkers' turns as one voice that hardly pauses, for a talker heard throughout
    /// (made once, beside the conversation's tracks).
    static func monologue(_ conversation: Conversation) throws -> String {
        let path = conversation.directory + "/monologue.wav"
        if FileManager.default.fileExists(atPath: path) { return path }
        let samples = (0..<conversation.length).map { index in Conversation.talkers.reduce(Float(0)) { $0 + conversation.tracks[$1]![index] } }
        try WAVAudio(sampleRate: 48_000, samples: samples).write(to: path)
        return path
    }

    /// The names whose keys the page's worker holds now.
    static func keyrings(_ call: PageInRoom) -> [String] { call.frames()["keyrings"] as? [String] ?? [] }

    /// Bob talks, leaves, and is back 2 s later in a new session (a new SSRC, the same identity)
    /// for 14 s: the page plays him after the 10 s mark of his leaving as before it, and he hears
    /// the page. Once he leaves for good, the page keeps his keys a few seconds (his last frames
    /// still play) and has forgotten them 10 s after, as the client does.
    @Test(.enabled(if: chromium != nil, "Debian's chromium is not installed: run Scripts/bootstrap (CI does), or apt-get install chromium"),
          .timeLimit(.minutes(10)))
    func aDepartedMembersKeysAreForgottenAfter10sAndOneBackWithinThatIsHeardThroughout() async throws {
        let conversation = try Conversation.standard.get()
        try await CallSlots.shared.withSlot(2) {
            // The page talks throughout, so what bob hears of it is told apart from its pauses.
            let monologue = try Self.monologue(conversation)
            guard let call = try await PageInRoom.open("browser-e2ee-departed", speech: monologue) else { return }
            let first = try await CallOutcome.run(["bob": call.room.configuration(for: "bob", input: .wav(path: monologue), durationSeconds: 3)])
            let leftAt = Date()
            let heldOnLeaving = Self.keyrings(call)
            try await Task.sleep(for: .seconds(2))

            // Back within the 10 s, heard on both sides of its end.
            struct Reading: Sendable { var energy: Double; var keyrings: [String]; var seconds: Double }
            let readings = Mutex<[Reading]>([])
            let back = try await CallOutcome.run(
                ["bob": call.room.configuration(for: "bob", input: .wav(path: monologue), durationSeconds: 14)],
                whileRunning: {
                    for mark in [7.0, 10.5, 13.0] {
                        try await Task.sleep(for: .seconds(max(0, mark - Date().timeIntervalSince(leftAt))))
                        let reading = Reading(energy: call.energies()["bob"] ?? 0, keyrings: Self.keyrings(call), seconds: Date().timeIntervalSince(leftAt))
                        readings.withLock { $0.append(reading) }
                    }
                })
            let bobHeard = try? call.room.received(by: "bob", from: "ada")
            let secondLeftAt = Date()
            try await Task.sleep(for: .seconds(4))
            let heldAfterFour = Self.keyrings(call)
            try await Task.sleep(for: .seconds(max(0, 11.5 - Date().timeIntervalSince(secondLeftAt))))
            let heldAfterEleven = Self.keyrings(call)
            await call.close()

            for outcome in [first, back] { if case let .failure(error)? = outcome.results["bob"] { Issue.record("bob's call failed: \(error)") } }
            let marks = readings.withLock { $0 }
            print("browser e2ee departed: keys held when bob left \(heldOnLeaving); back: \(marks.map { String(format: "%.1f s after he left: energy %.4f, keys %@", $0.seconds, $0.energy, $0.keyrings.description) }); "
                + "after he left again: \(heldAfterFour) at 4 s, \(heldAfterEleven) at 11.5 s")
            #expect(heldOnLeaving.contains("bob"), "the page held no key of bob's while he talked")
            #expect(marks.count == 3 && marks.allSatisfy { $0.keyrings.contains("bob") }, "the page forgot bob's keys while he was back: \(marks.map(\.keyrings))")
            if marks.count == 3 {
                // Heard before and after the mark where his first leaving's keys would have gone
                // (about 0.2 of energy a second while he talks; a page that forgot his keys at the
                // mark plays nothing of him after it, 1e-6). Not a rate: on a starved machine the
                // marks are read late, the last one perhaps after his call ended.
                let before = marks[1].energy - marks[0].energy, after = marks[2].energy - marks[1].energy
                #expect(before > 0.01, "the page played \(before) of bob between 7 and 10.5 s after he first left")
                #expect(after > 0.01, "the page played \(after) of bob from 10.5 s after he first left, against \(before) before")
            }
            // Bob, back, hears the page: it gave its key to him again.
            let recording = try #require(bobHeard, "bob recorded nothing of the page when he was back")
            let rms = recording.isEmpty ? 0 : (recording.reduce(0) { $0 + $1 * $1 } / Float(recording.count)).squareRoot()
            #expect(rms > 0.01, "bob, back, heard the page at RMS \(rms)")
            #expect(heldAfterFour.contains("bob"), "the page forgot bob's keys within 4 s of his leaving (the client keeps them 10 s)")
            #expect(!heldAfterEleven.contains("bob"), "the page still holds bob's keys 11.5 s after he left: \(heldAfterEleven)")
        }
    }

    /// Polls `read` every 200 ms until `done` holds of it or `seconds` pass; its last reading.
    static func poll<T>(for seconds: Double, _ read: () -> T, until done: (T) -> Bool) async throws -> T {
        let deadline = Date().addingTimeInterval(seconds)
        var value = read()
        while !done(value), Date() < deadline {
            try await Task.sleep(for: .milliseconds(200))
            value = read()
        }
        return value
    }

    /// RMS of `samples[range]` (clamped to the recording).
    static func level(_ samples: [Float], _ range: Range<Int>) -> Float {
        let part = samples[max(0, min(range.lowerBound, samples.count))..<max(0, min(range.upperBound, samples.count))]
        return part.isEmpty ? 0 : (part.reduce(0) { $0 + $1 * $1 } / Float(part.count)).squareRoot()
    }

    /// Bob met the page once; he comes back with another identity key (a new device). The page
    /// shows his row as changed, with the button to accept it; until the person presses it the
    /// page plays nothing of bob and bob hears nothing of the page; once pressed, each hears the
    /// other, and the row says the key is known (SECURITY.md: a changed key is refused until
    /// the person presses "Accept NAME's new key").
    @Test(.enabled(if: chromium != nil, "Debian's chromium is not installed: run Scripts/bootstrap (CI does), or apt-get install chromium"),
          .timeLimit(.minutes(10)))
    func aChangedKeyIsShownAndNothingOfItPlaysUntilThePersonAcceptsIt() async throws {
        let conversation = try Conversation.standard.get()
        try await CallSlots.shared.withSlot(2) {
            // The page talks throughout, so what bob hears of it is told apart from its pauses.
            let monologue = try Self.monologue(conversation)
            guard let call = try await PageInRoom.open("browser-e2ee-changed", speech: monologue) else { return }
            // The first meeting: the page pins bob's key.
            let firstRow = Mutex("")
            let first = try await CallOutcome.run(["bob": call.room.configuration(for: "bob", input: .wav(path: monologue), durationSeconds: 5)],
                                                  whileRunning: {
                                                      // His row, once the page shows his key (a busy machine takes a while to join him).
                                                      let row = try await Self.poll(for: 4.5, { call.keyRow(of: "bob") }, until: { $0.contains("Key") })
                                                      firstRow.withLock { $0 = row }
                                                  })
            try await Task.sleep(for: .seconds(1))

            call.room.identities.withLock { $0["bob"] = IdentityKey() }
            struct Seen: Sendable { var row = ""; var buttons: [String] = []; var energyBefore = 0.0; var energyAtAccept = 0.0; var energyAfter = 0.0; var rowAfter = "" }
            let seen = Mutex(Seen())
            let acceptedAt = Mutex<UInt64?>(nil)
            let changed = try await CallOutcome.run(
                ["bob": call.room.configuration(for: "bob", input: .wav(path: monologue), durationSeconds: 16)],
                whileRunning: {
                    let row = try await Self.poll(for: 4, { call.keyRow(of: "bob") }, until: { $0.contains("Key") })
                    try await Task.sleep(for: .seconds(0.5))
                    let before = call.energies()["bob"] ?? 0
                    let buttons = (try? call.page.evaluate("[...document.querySelectorAll('#roster button.accept-key')].map(button => button.textContent)")) as? [String] ?? []
                    seen.withLock { $0.row = row; $0.buttons = buttons; $0.energyBefore = before }
                    try await Task.sleep(for: .seconds(2.5))
                    seen.withLock { $0.energyAtAccept = call.energies()["bob"] ?? 0 }
                    // The person compared the safety number and presses the button.
                    // (The row is drawn again on every roster and key: a press that met a row being
                    // redrawn did nothing, and the person presses again, as anyone would.)
                    for _ in 0..<3 where !call.keyRow(of: "bob").contains("key known") {
                        acceptedAt.withLock { $0 = MonotonicClock.now() }
                        try? call.page.click("#roster button.accept-key")
                        _ = try await Self.poll(for: 2, { call.keyRow(of: "bob") }, until: { $0.contains("key known") })
                    }
                    try await Task.sleep(for: .seconds(3))
                    seen.withLock { $0.energyAfter = call.energies()["bob"] ?? 0; $0.rowAfter = call.keyRow(of: "bob") }
                })
            let recording = try? call.room.received(by: "bob", from: "ada")
            await call.close()

            for outcome in [first, changed] { if case let .failure(error)? = outcome.results["bob"] { Issue.record("bob's call failed: \(error)") } }
            let shown = seen.withLock { $0 }
            print("browser e2ee changed key: bob's row first \"\(firstRow.withLock { $0 })\", with his new key \"\(shown.row)\" \(shown.buttons), after accepting \"\(shown.rowAfter)\"; "
                + "the page played bob at energy \(shown.energyBefore) once his row showed the change, \(shown.energyAtAccept) when accepting 2.5 s later, \(shown.energyAfter) 4 s after")
            #expect(firstRow.withLock { $0 }.contains("key new to you"), "bob's row at the first meeting: \(firstRow.withLock { $0 })")
            #expect(shown.row.contains("KEY CHANGED: refused until you accept it"), "bob's row with his new key: \(shown.row)")
            #expect(shown.buttons == ["Accept bob's new key"], "the buttons on the roster: \(shown.buttons)")
            #expect(shown.energyAtAccept < 1e-6, "the page played bob's changed key before it was accepted (energy \(shown.energyAtAccept))")
            #expect(shown.energyAfter > 1e-4, "the page played nothing of bob once his key was accepted (energy \(shown.energyAfter))")
            #expect(shown.rowAfter.contains("key known") && !shown.rowAfter.contains("CHANGED"), "bob's row after accepting: \(shown.rowAfter)")
            // Bob's side: nothing of the page before, the page after.
            let heard = try #require(recording, "bob recorded nothing of the page")
            if let accepted = acceptedAt.withLock({ $0 }), let played = changed.statistics["bob"]?.playbackStartedAtNanoseconds {
                let acceptSample = Int(Int64(bitPattern: accepted &- played) * 48_000 / 1_000_000_000)
                let before = Self.level(heard, 0..<acceptSample), after = Self.level(heard, (acceptSample + 48_000)..<(acceptSample + 4 * 48_000))
                print(String(format: "browser e2ee changed key: bob heard the page at RMS %.4f before the key was accepted, %.4f after", before, after))
                #expect(before < 0.001, "bob heard the page before it accepted his changed key")
                #expect(after > 0.01, "bob did not hear the page once it accepted his key")
            } else {
                Issue.record("no time on bob's recording to compare with")
            }
        }
    }

    /// The relay hides cy from the page (its roster events lose her, as a hostile relay would
    /// send them) while bob sees her and gives her his key: the page names bob, in its status
    /// and on his row, as having given his key to a room of 3 where it sees 2; with bob and the
    /// page alone before it said nothing of the sort, and once cy leaves it says the views agree.
    @Test(.enabled(if: chromium != nil, "Debian's chromium is not installed: run Scripts/bootstrap (CI does), or apt-get install chromium"),
          .timeLimit(.minutes(10)))
    func aMemberTheRelayHidesFromThePageIsNamed() async throws {
        let conversation = try Conversation.standard.get()
        try await CallSlots.shared.withSlot(3) {
            guard let call = try await PageInRoom.open("browser-e2ee-hidden", speech: conversation.path(of: "ada")) else { return }
            _ = try call.page.evaluate("""
                (() => { const original = handle;
                         handle = event => original(event.kind === "roster" ? Object.assign({}, event, { roster: event.roster.filter(member => member.identity !== "cy") }) : event);
                         return true; })()
                """)
            struct Seen: Sendable { var status = ""; var row = "" }
            let alone = Mutex(Seen()), hidden = Mutex(Seen()), after = Mutex(Seen())
            let cyOutcome = Mutex<CallOutcome?>(nil)
            let bob = try await CallOutcome.run(
                ["bob": call.room.configuration(for: "bob", input: .wav(path: conversation.path(of: "bob")), durationSeconds: 20)],
                whileRunning: {
                    try await Task.sleep(for: .seconds(4))
                    alone.withLock { $0 = Seen(status: call.page.shown("#status"), row: call.keyRow(of: "bob")) }
                    let cy = try await CallOutcome.run(
                        ["cy": call.room.configuration(for: "cy", input: .wav(path: conversation.path(of: "cy")), durationSeconds: 8)],
                        whileRunning: {
                            // The warning comes 3 s after bob's key for a room with cy in it.
                            let seen = try await Self.poll(for: 7.5, { Seen(status: call.page.shown("#status"), row: call.keyRow(of: "bob")) },
                                                           until: { $0.status.contains("Warning") && $0.row.contains("Warning") })
                            hidden.withLock { $0 = seen }
                        })
                    cyOutcome.withLock { $0 = cy }
                    let seen = try await Self.poll(for: 5, { Seen(status: call.page.shown("#status"), row: call.keyRow(of: "bob")) },
                                                   until: { $0.status.contains("matches yours again") })
                    after.withLock { $0 = seen }
                })
            let roster = call.page.shown("#roster")
            await call.close()

            if case let .failure(error)? = bob.results["bob"] { Issue.record("bob's call failed: \(error)") }
            if case let .failure(error)? = cyOutcome.withLock({ $0 })?.results["cy"] { Issue.record("cy's call failed: \(error)") }
            let (before, during, later) = (alone.withLock { $0 }, hidden.withLock { $0 }, after.withLock { $0 })
            print("browser e2ee hidden member: alone \(before); cy hidden \(during); cy gone \(later); roster at the end \(roster)")
            #expect(!before.status.contains("Warning") && !before.row.contains("Warning"), "the page warned with nobody hidden: \(before)")
            #expect(during.status.contains("Warning: bob gave their key to a room of 3 where you see 2: someone you cannot see may be listening"),
                    "the page's status while cy was hidden: \(during.status)")
            #expect(during.row.contains("Warning: gave their key to a room of 3 where you see 2"), "bob's row while cy was hidden: \(during.row)")
            #expect(!roster.contains("cy"), "the page showed cy: the relay was to hide her")
            #expect(later.status.contains("bob's view of the room matches yours again") && !later.row.contains("Warning"),
                    "once cy left: status \(later.status), bob's row \(later.row)")
        }
    }
}
