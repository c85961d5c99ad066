import ParleyBasics
import ParleyWebRTC
import ParleyWire
import Testing
@testable import ParleyRelay

/// How a browser's slots are given out: each voice keeps where its first packet put it (a
/// browser binds an SSRC to that section) while it is in the room, a slot frees when the
/// roster says its voice left, the voices beyond the slots share the sending section, and
/// every copy carries the MID of where its voice is.
@Suite("Browser receiver slots")
struct BrowserReceiversTests {
    static let second: UInt64 = 1_000_000_000

    @Test func voicesTakeFreeSlotsAndKeepThemTheRestShare() {
        var slots = ReceiverSlots(count: 2)
        slots.rosterChanged([100, 200, 300])
        #expect(slots.placement(of: 100, nowNanoseconds: 1) == .slot(0))
        #expect(slots.placement(of: 200, nowNanoseconds: 2) == .slot(1))
        #expect(slots.placement(of: 100, nowNanoseconds: 3) == .slot(0))
        #expect(slots.placement(of: 300, nowNanoseconds: 4) == .shared, "both slots are busy: the third voice shares")
        // Long after, a voice that paused is where it was.
        #expect(slots.placement(of: 200, nowNanoseconds: 600 * Self.second) == .slot(1))
    }

    @Test func aVoiceThatLeftFreesItsSlotForTheNextNewVoiceAndNoVoiceMoves() {
        var slots = ReceiverSlots(count: 2)
        slots.rosterChanged([100, 200, 300])
        _ = slots.placement(of: 100, nowNanoseconds: 1)
        _ = slots.placement(of: 200, nowNanoseconds: 2)
        #expect(slots.placement(of: 300, nowNanoseconds: 3) == .shared)
        // 200 leaves; 400 joins. 300 stays shared (its browser stream is bound there); 400 takes the slot.
        slots.rosterChanged([100, 300, 400])
        #expect(slots.holders == [100, nil])
        #expect(slots.placement(of: 300, nowNanoseconds: 4) == .shared)
        #expect(slots.placement(of: 400, nowNanoseconds: 5) == .slot(1))
        // 300 leaves the shared section; if it came back (a new member with its SSRC) it is new.
        slots.rosterChanged([100, 400])
        slots.rosterChanged([100, 300, 400])
        #expect(slots.placement(of: 300, nowNanoseconds: 6) == .shared, "no slot is free")
    }

    @Test func aVoiceNoRosterNamedYetKeepsItsSlotThroughRosterChanges() {
        var slots = ReceiverSlots(count: 1)
        slots.rosterChanged([1])
        // 7's packets arrive before a roster names it: a roster without it is no departure.
        #expect(slots.placement(of: 7, nowNanoseconds: 1) == .slot(0))
        slots.rosterChanged([1])
        #expect(slots.placement(of: 7, nowNanoseconds: 2) == .slot(0))
        slots.rosterChanged([1, 7])
        slots.rosterChanged([1])
        #expect(slots.holders == [nil])
    }

    @Test func aSlotOfAVoiceNoRosterNamedFreesAfterItsSilence() {
        var slots = ReceiverSlots(count: 1)
        _ = slots.placement(of: 7, nowNanoseconds: Self.second)
        #expect(slots.placement(of: 8, nowNanoseconds: 2 * Self.second) == .shared)
        #expect(slots.placement(of: 9, nowNanoseconds: Self.second + ReceiverSlots.unlistedIdleNanoseconds) == .slot(0))
        // A clock read earlier on another loop neither traps nor frees anything.
        #expect(slots.placement(of: 10, nowNanoseconds: 0) == .shared)
        #expect(slots.placement(of: 9, nowNanoseconds: 0) == .slot(0))
    }

    @Test func randomTrafficNeverGivesOneSlotToTwoVoicesNorMovesAVoice() {
        var rng = SplitMix64(seed: 0x534C_4F54)
        var slots = ReceiverSlots(count: 4)
        var now: UInt64 = 0
        var placed: [UInt32: ReceiverSlots.Placement] = [:]
        var roster: Set<UInt32> = []
        for _ in 0..<20_000 {
            now += UInt64.random(in: 0...Self.second, using: &rng)
            if UInt8.random(in: 0...50, using: &rng) == 0 {
                roster = Set((0..<UInt32.random(in: 0...8, using: &rng)).map { _ in UInt32.random(in: 0...11, using: &rng) })
                for left in Set(placed.keys).subtracting(roster) { placed[left] = nil }
                slots.rosterChanged(roster)
            }
            let ssrc = UInt32.random(in: 0...11, using: &rng)
            let placement = slots.placement(of: ssrc, nowNanoseconds: now)
            if case let .slot(index) = placement { #expect(slots.holders[index] == ssrc) }
            if roster.contains(ssrc), let before = placed[ssrc] { #expect(before == placement, "a voice in the room moved") }
            if roster.contains(ssrc) { placed[ssrc] = placement }
            let held = slots.holders.compactMap { $0 }
            #expect(Set(held).count == held.count)
        }
    }

    /// A browser's offer: its microphone on mid 0 (receiving too), two slots.
    static func offer(sendingReceives: Bool = true, mid: Bool = true) throws -> WebRTCOffer {
        let section = { (mid: String, direction: String) in """
            m=audio 9 UDP/TLS/RTP/SAVPF 111\r
            a=ice-ufrag:brws\r
            a=ice-pwd:browserpasswordbrowserpassword\r
            a=fingerprint:sha-256 DA:A6:59:CD:47:0B:29:5A:D1:0C:A0:67:E3:B4:B5:26:7F:50:C5:4B:BC:11:81:D9:C0:2C:C3:FF:E7:7C:EC:A7\r
            a=setup:actpass\r
            a=mid:\(mid)\r
            a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level\r
            a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r
            a=\(direction)\r
            a=rtcp-mux\r
            a=rtpmap:111 opus/48000/2\r
            a=ssrc:1111 cname:x\r

            """ }
        var text = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 a b\r\n"
            + section("0", sendingReceives ? "sendrecv" : "sendonly") + section("a", "recvonly") + section("b", "recvonly")
        if !mid { text = text.replacingOccurrences(of: "a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r\n", with: "") }
        return try WebRTCOffer(SessionDescription(parsing: text))
    }

    /// The MID a browser reads in the stamped copy of `ssrc`'s packet, or nil if it is not sent.
    static func mid(_ receivers: BrowserReceivers, ssrc: UInt32, at now: UInt64) throws -> String? {
        let packet = try RTPHeader(payloadType: 111, sequenceNumber: 1, timestamp: 2, ssrc: ssrc,
                                   headerExtension: .elements([AudioLevel(voiceActivity: true, level: 20).element])).serialized(payload: [1, 2, 3])
        var buffer = packet + [UInt8](repeating: 0, count: RTPMidStamp.maximumGrowth)
        guard let count = buffer.withUnsafeMutableBytes({ buffer -> Int? in
            let view = try? RTPPacketView(parsing: UnsafeRawBufferPointer(rebasing: buffer[0..<packet.count]))
            return view.flatMap { receivers.stamp($0, in: buffer, nowNanoseconds: now)?.bytes.count }
        }) else { return nil }
        return try RTPPacketView.withParsed(Array(buffer.prefix(count))) { view in
            #expect(view.audioLevel?.level == 20, "the speaker's level reaches the browser")
            return view.headerExtensionElements.first { $0.id == 4 }.map { String(decoding: $0.data, as: UTF8.self) }
        }
    }

    @Test func eachCopyCarriesItsSlotsMidAndTheRestShareTheSendingSection() throws {
        let receivers = try #require(BrowserReceivers(offer: try Self.offer()))
        receivers.rosterChanged([10, 20, 30, 40])
        #expect(try Self.mid(receivers, ssrc: 10, at: 1) == "a")
        #expect(try Self.mid(receivers, ssrc: 20, at: 2) == "b")
        #expect(try Self.mid(receivers, ssrc: 10, at: 3) == "a")
        #expect(try Self.mid(receivers, ssrc: 30, at: 4) == "0", "a third voice plays on the shared section")
        // 20 leaves: 40, new, takes its slot; 30 stays shared.
        receivers.rosterChanged([10, 30, 40])
        #expect(try Self.mid(receivers, ssrc: 40, at: 5) == "b")
        #expect(try Self.mid(receivers, ssrc: 30, at: 6) == "0")
    }

    @Test func withoutASharedSectionAVoiceBeyondTheSlotsIsNotSent() throws {
        let receivers = try #require(BrowserReceivers(offer: try Self.offer(sendingReceives: false)))
        #expect(try Self.mid(receivers, ssrc: 10, at: 1) == "a")
        #expect(try Self.mid(receivers, ssrc: 20, at: 1) == "b")
        #expect(try Self.mid(receivers, ssrc: 30, at: 1) == nil)
    }

    @Test func withoutTheMidExtensionThereAreNoSlots() throws {
        #expect(BrowserReceivers(offer: try Self.offer(mid: false)) == nil)
    }
}
