@testable import ParleyRelay
import ParleyWire
import Testing

/// The admission rules as plain values, with time passed in: how often an identity may
/// join, when a room's roster goes out, what of a member's RTCP goes on, and what a log
/// line may show of text from the network.
@Suite("Admission rules without a socket")
struct AdmissionPolicyTests {
    @Test func anIdentityMayJoinItsBurstThenAFewTimesAMinute() {
        var budget = IdentityJoinBudget(limits: RelayLimits())
        var allowed = 0
        for attempt in 0..<100 where budget.allow(identity: "mallory", room: "standup", now: UInt64(attempt) * 10_000_000) { allowed += 1 }
        #expect(allowed == 10, "the burst, all within a second")
        let another = budget.allow(identity: "ada", room: "standup", now: 1_000_000_000)
        let elsewhere = budget.allow(identity: "mallory", room: "other", now: 1_000_000_000)
        #expect(another, "another identity has its own")
        #expect(elsewhere, "and so has the same name in another room")
        var later = 0
        for second in 1...60 where budget.allow(identity: "mallory", room: "standup", now: UInt64(second) * 1_000_000_000) { later += 1 }
        #expect((19...21).contains(later), "20 a minute after the burst, got \(later)")
    }

    @Test func anIdentityBudgetTableForgetsIdleIdentitiesWhenFull() {
        var limits = RelayLimits()
        limits.maximumRooms = 1
        limits.maximumMembersPerRoom = 2
        var budget = IdentityJoinBudget(limits: limits)
        for index in 0..<budget.capacity { _ = budget.allow(identity: "member-\(index)", room: "r", now: 0) }
        #expect(budget.count == budget.capacity)
        _ = budget.allow(identity: "newcomer", room: "r", now: 3_600_000_000_000)
        #expect(budget.count == 1, "an hour later every other entry had refilled and was dropped")
    }

    @Test func aRoomsRosterGoesOutAtOnceThenAtMostEveryQuarterSecond() {
        var schedule = RosterSchedule()
        let lone = schedule.roomChanged("standup", now: 0)
        let next = schedule.roomChanged("standup", now: 10_000_000)
        let third = schedule.roomChanged("standup", now: 20_000_000)
        let other = schedule.roomChanged("other", now: 20_000_000)
        let early = schedule.due(now: 200_000_000)
        let due = schedule.due(now: 250_000_000)
        let after = schedule.due(now: 600_000_000)
        let quiet = schedule.roomChanged("standup", now: 600_000_000)
        #expect(lone, "a lone change goes out at once")
        #expect(!next && !third, "the next ones are held")
        #expect(other, "rooms have their own schedules")
        #expect(early.isEmpty)
        #expect(due == ["standup"], "the held changes go out together")
        #expect(after.isEmpty)
        #expect(quiet, "quiet again: at once")
        _ = schedule.roomChanged("standup", now: 610_000_000)
        schedule.roomClosed("standup")
        #expect(!schedule.hasPending)
    }

    @Test func onlyTheSendersOwnReportFiguresGoOnFromItsRTCP() throws {
        let forged = RTCPReportBlock(ssrc: 2, fractionLost: 255, cumulativeLost: 0x7F_FFFF, extendedHighestSequence: 9, jitter: 9)
        let packets: [RTCPPacket] = [
            .senderReport(RTCPSenderReport(ssrc: 1, ntpTimestamp: NTPTimestamp(rawValue: 77), rtpTimestamp: 960, packetCount: 5, octetCount: 400,
                                           reportBlocks: [forged])),
            .sourceDescription(RTCPSourceDescription(chunks: [.init(source: 1, items: [.cname("own"), .init(type: 2, value: Array("name".utf8))]),
                                                              .init(source: 2, items: [.cname("someone else")])])),
            .goodbye(RTCPGoodbye(sources: [2, 3], reason: "gone")),
            .genericNACK(RTCPGenericNACK(senderSSRC: 1, mediaSSRC: 2, lost: [7])),
        ]
        let terminated = try #require(RTCPTermination(packets, from: 1))
        #expect(terminated.forward == [
            .senderReport(RTCPSenderReport(ssrc: 1, ntpTimestamp: NTPTimestamp(rawValue: 77), rtpTimestamp: 960, packetCount: 5, octetCount: 400)),
            .sourceDescription(RTCPSourceDescription(chunks: [.init(source: 1, items: [.cname("own")])])),
        ])
        #expect(terminated.reportBlocks == [forged], "kept for the member's own gauges, never forwarded")
        #expect(terminated.nacks == 1)
        #expect(terminated.senderReportTime == NTPTimestamp(rawValue: 77))
        #expect(RTCPTermination([.receiverReport(RTCPReceiverReport(ssrc: 2, reportBlocks: []))], from: 1) == nil, "a report in another's name")
        #expect(RTCPTermination([.receiverReport(RTCPReceiverReport(ssrc: 1, reportBlocks: [forged]))], from: 1)?.forward == nil,
                "a receiver report alone forwards nothing")
    }

    @Test func textFromTheNetworkCannotBreakOrReorderALogLine() {
        #expect("parley/1.0".logSafe() == "parley/1.0")
        #expect("a\nb\r\u{0}c".logSafe() == "a\\u{a}b\\u{d}\\u{0}c")
        #expect("ada\u{202E}nimda\u{2066}".logSafe() == "ada\\u{202e}nimda\\u{2066}")
        #expect("line\u{2028}sep".logSafe() == "line\\u{2028}sep")
        #expect(String(repeating: "x", count: 100).logSafe(limit: 10) == "xxxxxxxxxx…")
        #expect("Zoë 👩‍👩‍👧".logSafe() == "Zoë 👩‍👩‍👧", "ordinary text, joiners included, is left alone")
        #expect("ad\u{200B}min".logSafe() == "ad\\u{200b}min", "a zero-width space is shown, so the name cannot pass for another")
        #expect("a\u{200D}b\u{00AD}c\u{2060}d\u{FEFF}".logSafe() == "a\\u{200d}b\\u{ad}c\\u{2060}d\\u{feff}", "every invisible formatting character is shown")
        #expect("❤️‍🔥 and 👩🏽‍💻".logSafe() == "❤️‍🔥 and 👩🏽‍💻", "a joiner between emoji only joins the picture")
        #expect("\u{1B}]0;title\u{7}\u{9B}31m".logSafe() == "\\u{1b}]0;title\\u{7}\\u{9b}31m", "OSC, BEL and C1 controls are shown, never sent")
    }

    @Test func identitiesThatReorderOrBreakTextAreRefused() {
        #expect(ParleyNames.problem(withIdentity: "Zoë") == nil)
        #expect(ParleyNames.problem(withIdentity: "👩‍👩‍👧 family") == nil)
        #expect(ParleyNames.problem(withIdentity: "ada\u{202E}nimda")?.contains("U+202E") == true)
        #expect(ParleyNames.problem(withIdentity: "a\u{2067}b")?.contains("bidirectional") == true)
        #expect(ParleyNames.problem(withIdentity: "a\u{2028}b")?.contains("line break") == true)
        #expect(ParleyNames.problem(withIdentity: "a\nb")?.contains("U+000A") == true)
        #expect(ParleyNames.problem(withIdentity: "ad\u{200B}min")?.contains("invisible formatting character (U+200B)") == true)
        #expect(ParleyNames.problem(withIdentity: "ad\u{200D}min")?.contains("U+200D") == true, "a joiner between letters is refused")
        #expect(ParleyNames.problem(withIdentity: "ada\u{00AD}") != nil && ParleyNames.problem(withIdentity: "\u{FEFF}ada") != nil)
        #expect(ParleyNames.problem(withIdentity: "ada 👩🏽‍💻") == nil, "an emoji sequence is a name's to have")
    }
}
