import ParleyBasics
import ParleyWebRTC
import ParleyWire
import Testing
@testable import ParleyRelay

/// How a browser's slots are given out: each voice keeps its slot while it talks or pauses,
/// a slot goes to another voice only once its own has been silent for a while and a voice
/// needs it, the voices beyond the slots share the sending section, and every copy carries
/// the MID of where its voice is.
@Suite("Browser receiver slots")
struct BrowserReceiversTests {
    static let second: UInt64 = 1_000_000_000

    @Test func voicesTakeFreeSlotsAndKeepThem() {
        var slots = ReceiverSlots(count: 2)
        #expect(slots.slot(for: 100, nowNanoseconds: 1) == 0)
        #expect(slots.slot(for: 200, nowNanoseconds: 2) == 1)
        #expect(slots.slot(for: 100, nowNanoseconds: 3) == 0)
        #expect(slots.slot(for: 300, nowNanoseconds: 4) == nil, "both slots are busy: the third voice has none")
        // Long after, a slot still held by a voice that paused is its own while no one needs it.
        #expect(slots.slot(for: 200, nowNanoseconds: 60 * Self.second) == 1)
    }

    @Test func aSilentVoiceGivesItsSlotToOneThatNeedsIt() {
        var slots = ReceiverSlots(count: 2)
        _ = slots.slot(for: 100, nowNanoseconds: 1 * Self.second)
        _ = slots.slot(for: 200, nowNanoseconds: 2 * Self.second)
        _ = slots.slot(for: 100, nowNanoseconds: 3 * Self.second)
        // 200 has been silent 2 s: not long enough.
        #expect(slots.slot(for: 300, nowNanoseconds: 4 * Self.second) == nil)
        // Now 200 has been silent longer than the idle time, 100 not: 300 takes 200's slot.
        let later = 2 * Self.second + ReceiverSlots.idleNanoseconds
        _ = slots.slot(for: 100, nowNanoseconds: later)
        #expect(slots.slot(for: 300, nowNanoseconds: later) == 1)
        #expect(slots.holders == [100, 300])
        // And 200, back, has none until one idles.
        #expect(slots.slot(for: 200, nowNanoseconds: later + 1) == nil)
    }

    @Test func theLongestSilentSlotGoesFirst() {
        var slots = ReceiverSlots(count: 3)
        _ = slots.slot(for: 1, nowNanoseconds: 3 * Self.second)
        _ = slots.slot(for: 2, nowNanoseconds: 1 * Self.second)
        _ = slots.slot(for: 3, nowNanoseconds: 2 * Self.second)
        #expect(slots.slot(for: 4, nowNanoseconds: 100 * Self.second) == 1)
        #expect(slots.slot(for: 5, nowNanoseconds: 100 * Self.second) == 2)
        #expect(slots.slot(for: 6, nowNanoseconds: 100 * Self.second) == 0)
    }

    @Test func aClockReadEarlierOnAnotherLoopNeitherTrapsNorFreesASlot() {
        var slots = ReceiverSlots(count: 1)
        _ = slots.slot(for: 1, nowNanoseconds: 10 * Self.second)
        #expect(slots.slot(for: 2, nowNanoseconds: 0) == nil)
        #expect(slots.slot(for: 1, nowNanoseconds: 0) == 0)
        #expect(slots.slot(for: 2, nowNanoseconds: .max) == 0)
    }

    @Test func randomTrafficNeverGivesOneSlotToTwoVoicesOrOneVoiceTwoSlots() {
        var rng = SplitMix64(seed: 0x534C_4F54)
        var slots = ReceiverSlots(count: 4)
        var now: UInt64 = 0
        for _ in 0..<20_000 {
            now += UInt64.random(in: 0...(Self.second / 2), using: &rng)
            let ssrc = UInt32.random(in: 0...9, using: &rng)
            if let slot = slots.slot(for: ssrc, nowNanoseconds: now) { #expect(slots.holders[slot] == ssrc) }
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
        guard let count = buffer.withUnsafeMutableBytes({ receivers.stamp($0, count: packet.count, nowNanoseconds: now) }) else { return nil }
        return try RTPPacketView.withParsed(Array(buffer.prefix(count))) { view in
            #expect(view.audioLevel?.level == 20, "the speaker's level reaches the browser")
            return view.headerExtensionElements.first { $0.id == 4 }.map { String(decoding: $0.data, as: UTF8.self) }
        }
    }

    @Test func eachCopyCarriesItsSlotsMidAndTheRestShareTheSendingSection() throws {
        let receivers = try #require(BrowserReceivers(offer: Self.offer()))
        #expect(try Self.mid(receivers, ssrc: 10, at: 1) == "a")
        #expect(try Self.mid(receivers, ssrc: 20, at: 2) == "b")
        #expect(try Self.mid(receivers, ssrc: 10, at: 3) == "a")
        #expect(try Self.mid(receivers, ssrc: 30, at: 4) == "0", "a third voice plays on the shared section")
        // 20 left; after the idle time 30 moves onto its slot.
        let later = 2 + ReceiverSlots.idleNanoseconds
        #expect(try Self.mid(receivers, ssrc: 10, at: later) == "a")
        #expect(try Self.mid(receivers, ssrc: 30, at: later) == "b")
    }

    @Test func withoutASharedSectionAVoiceBeyondTheSlotsIsNotSent() throws {
        let receivers = try #require(BrowserReceivers(offer: Self.offer(sendingReceives: false)))
        #expect(try Self.mid(receivers, ssrc: 10, at: 1) == "a")
        #expect(try Self.mid(receivers, ssrc: 20, at: 1) == "b")
        #expect(try Self.mid(receivers, ssrc: 30, at: 1) == nil)
    }

    @Test func withoutTheMidExtensionThereAreNoSlots() throws {
        #expect(BrowserReceivers(offer: try Self.offer(mid: false)) == nil)
    }
}
