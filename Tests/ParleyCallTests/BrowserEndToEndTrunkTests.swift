import Foundation
import Logging
import ParleyAdmin
import ParleyBasics
@testable import ParleyClient
import ParleyEvaluation
import ParleyRelay
import Synchronization
import Testing

/// A browser member of an end-to-end encrypted room on one relay, a `parley` member on another,
/// the room carried between them over a trunk as a cluster's relays carry it (`CascadedRoom`:
/// each relay trusts the other's key, one token secret; the trunk opened as the browser's relay
/// opens it when its member's room is hosted elsewhere, without etcd's placement).
@Suite(.serialized)
struct BrowserEndToEndTrunkTests {
    static let chromium = BrowserCallTests.chromium

    /// Ada's page joins relay 2; relay 2 opens a trunk to relay 1, where bob's `parley call`
    /// joins. Each hears the other (bob's recording of the page follows its speech; the page
    /// plays bob's voice, frames its worker opened), the media keys having crossed the trunk
    /// both ways sealed, and both show the same safety number for each other.
    @Test(.enabled(if: chromium != nil, "Debian's chromium is not installed: run Scripts/bootstrap (CI does), or apt-get install chromium"),
          .timeLimit(.minutes(5)))
    func aPageAndAParleyClientOnTwoRelaysHearEachOtherOverATrunkInAnEndToEndEncryptedRoom() async throws {
        let conversation = try Conversation.standard.get()
        try await CallSlots.shared.withSlot(3) {
            let room = try await CascadedRoom(room: "browser-e2ee-trunk", relayCount: 2, placement: ["bob": 0], trunks: [], endToEnd: true,
                                              acceptsBrowsers: true)
            var logger = Logger(label: "parley-browser-e2ee-trunk-test-web")
            logger.logLevel = .error
            let web = try BrowserWebServer.start(serving: room.relays[1], at: HostAndPort(host: "127.0.0.12", port: 0), logger: logger)
            let page = try ChromiumDevTools(
                chromium: Self.chromium!, url: "http://127.0.0.12:\(web.localAddress!.port!)/join#token=\(room.token("ada"))&stats=1",
                speech: conversation.path(of: "ada"), directory: room.directory)
            defer {
                page.stop()
                web.close()
            }
            try page.attach()
            let joined = try page.waitFor("document.getElementById('mute').disabled === false", seconds: 45)
            #expect(joined, "the page never connected to relay 2; it says \(page.shown("#status")); Chromium's log:\n\(page.logTail())")
            guard joined else { return await room.close() }
            // Relay 2 carries its member's room to relay 1 (a trunk whose far side stays empty
            // for 10 s closes, so it is opened once the page is in).
            try room.relays[1].openTrunk(room: room.room, to: room.peer(0))
            let deadline = Date().addingTimeInterval(5)
            while room.openTrunkEnds < 2, Date() < deadline { try await Task.sleep(for: .milliseconds(10)) }
            #expect(room.openTrunkEnds == 2, "the trunk between the relays did not open")

            let pageHalfway = Mutex("{}")
            let bobsSafetyNumber = Mutex<String?>(nil)
            let sessions = Mutex<[String: CallSession]>([:])
            let outcome = try await CallOutcome.run(
                ["bob": room.configuration(for: "bob", input: .wav(path: conversation.path(of: "bob")), durationSeconds: conversation.seconds + 2)],
                whileRunning: {
                    try await Task.sleep(for: .seconds(conversation.seconds / 2))
                    let text = try page.evaluate("parleyEndToEnd().then(JSON.stringify)") as? String ?? "{}"
                    pageHalfway.withLock { $0 = text }
                    let safety = sessions.withLock { $0["bob"]?.statistics().endToEnd?.members.first { $0.identity == "ada" }?.safetyNumber }
                    bobsSafetyNumber.withLock { $0 = safety }
                },
                onSessions: { made in sessions.withLock { $0 = made } })
            try await Task.sleep(for: .seconds(1.5))
            let voices = (try? page.evaluate("parleyVoices().then(JSON.stringify)")) as? String ?? "[]"
            let stats = BrowserEndToEndTests.latestStats(in: page.logPath)
            let heard = try? room.recordings("bob", "ada")
            await room.close()

            if case let .failure(error)? = outcome.results["bob"] { Issue.record("bob's call failed: \(error)") }
            let recording = try #require(heard, "bob recorded nothing of the page across the trunk")
            let match = EnvelopeMatch.best(of: conversation.tracks["ada"]!, in: recording)
            let status = (try? JSONSerialization.jsonObject(with: Data(pageHalfway.withLock { $0 }.utf8)) as? [String: Any]) ?? [:]
            let frames = status["frames"] as? [String: Any] ?? [:]
            let received = try #require(stats, "the page reported no statistics; Chromium's log:\n\(page.logTail())")
            let bobTalks = Double(conversation.turns.filter { $0.talker == "bob" }.map(\.range.count).reduce(0, +)) / 48_000
            print("browser e2ee over a trunk: bob's recording of the page follows its speech with envelope correlation \(match.correlation); "
                + "the page received \(received.packetsReceived) packets, played \(received.totalAudioEnergy) of energy; its worker halfway \(frames); voices \(voices)")
            #expect(match.correlation > 0.6, "bob's recording of the page does not follow its speech (envelope correlation \(match.correlation))")
            #expect(received.packetsReceived > Int(bobTalks * 50 * 0.9), "the page received \(received.packetsReceived) packets; bob talked \(bobTalks) s")
            #expect(received.totalAudioEnergy > 0.01 * conversation.seconds / 3 / 10, "the page played \(received.totalAudioEnergy) of audio energy: silence where bob talked")
            #expect((frames["opened"] as? Int ?? 0) > Int(bobTalks / 2 * 50 * 0.8), "the page's worker opened \(frames["opened"] ?? 0) frames by halfway")
            let bobOnPage = (status["members"] as? [[String: Any]] ?? []).first { $0["identity"] as? String == "bob" }
            let pageSafety = bobOnPage?["safetyNumber"] as? String, bobSafety = bobsSafetyNumber.withLock { $0 }
            #expect(pageSafety != nil && pageSafety == bobSafety, "the page shows \(pageSafety ?? "none") for bob, bob shows \(bobSafety ?? "none") for the page")
        }
    }
}
