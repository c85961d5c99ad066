import Testing
@testable import ParleyWire
import func ParleyRelayTestSupport.bytes

@Suite("RTCP compound packets (RFC 3550 §6, RFC 4585)")
struct RTCPTests {
    let block = RTCPReportBlock(
        ssrc: 0x1111_1111, fractionLost: 0x40, cumulativeLost: 0x000123,
        extendedHighestSequence: 0x0001_0005, jitter: 0x77, lastSenderReport: 0xAABB_CCDD,
        delaySinceLastSenderReport: 0x0001_0000
    )
    let blockBytes = bytes(fromHex: "11111111 40 000123 00010005 00000077 AABBCCDD 00010000")

    @Test func senderReportMatchesTheFigureByteForByte() throws {
        let report = RTCPSenderReport(
            ssrc: 0x0102_0304, ntpTimestamp: NTPTimestamp(rawValue: 0xE000_0001_8000_0000),
            rtpTimestamp: 0x0000_3C00, packetCount: 10, octetCount: 1_000, reportBlocks: [block]
        )
        // V=2 RC=1 → 0x81; PT 200; length = (28 + 24) / 4 - 1 + 1 = 12 words.
        let expected = bytes(fromHex: "81 C8 000C 01020304 E0000001 80000000 00003C00 0000000A 000003E8") + blockBytes
        #expect(try RTCPCompoundPacket.serialized([.senderReport(report)]) == expected)
        #expect(try RTCPCompoundPacket.parse(expected) == [.senderReport(report)])
    }

    @Test func receiverReportMatchesTheFigureByteForByte() throws {
        let report = RTCPReceiverReport(ssrc: 0x0A0B_0C0D, reportBlocks: [block])
        let expected = bytes(fromHex: "81 C9 0007 0A0B0C0D") + blockBytes
        #expect(try RTCPCompoundPacket.serialized([.receiverReport(report)]) == expected)
        #expect(try RTCPCompoundPacket.parse(expected) == [.receiverReport(report)])
    }

    @Test func negativeCumulativeLossIsSignExtended() throws {
        var negative = block
        negative.cumulativeLost = -2
        let serialized = try RTCPCompoundPacket.serialized([.receiverReport(RTCPReceiverReport(ssrc: 1, reportBlocks: [negative]))])
        #expect(Array(serialized[13..<16]) == bytes(fromHex: "FFFFFE"))
        guard case let .receiverReport(parsed) = try RTCPCompoundPacket.parse(serialized).first else {
            Issue.record("not a receiver report"); return
        }
        #expect(parsed.reportBlocks.first?.cumulativeLost == -2)
    }

    @Test func cumulativeLossIsClampedTo24Bits() {
        let huge = RTCPReportBlock(ssrc: 1, fractionLost: 0, cumulativeLost: 50_000_000, extendedHighestSequence: 0, jitter: 0)
        #expect(huge.cumulativeLost == 0x7F_FFFF)
    }

    @Test func sourceDescriptionWithCNAMEMatchesTheFigure() throws {
        // SC=1, PT 202; chunk: SSRC, CNAME "ab" (01 02 61 62), terminator and pad to 8 bytes.
        let sdes = RTCPSourceDescription(chunks: [.init(source: 0x0000_0042, items: [.cname("ab")])])
        let expected = bytes(fromHex: "81 CA 0003 00000042 01 02 61 62 00000000")
        #expect(try RTCPCompoundPacket.serialized([.sourceDescription(sdes)]) == expected)
        let parsed = try RTCPCompoundPacket.parse(expected)
        #expect(parsed == [.sourceDescription(sdes)])
        if case let .sourceDescription(value) = parsed[0] { #expect(value.chunks[0].cname == "ab") }
    }

    @Test func sourceDescriptionChunkThatFillsAWordStillGetsATerminatorWord() throws {
        // SSRC + item (2 + 2) = 8 bytes: the null terminator needs a whole extra word.
        let sdes = RTCPSourceDescription(chunks: [.init(source: 7, items: [.cname("xy")]), .init(source: 8, items: [])])
        let bytes = try RTCPCompoundPacket.serialized([.sourceDescription(sdes)])
        #expect(bytes.count == 4 + 12 + 8)
        #expect(try RTCPCompoundPacket.parse(bytes) == [.sourceDescription(sdes)])
    }

    @Test func goodbyeWithReasonMatchesTheFigure() throws {
        let bye = RTCPGoodbye(sources: [0x0102_0304], reason: "bye")
        // SC=1, PT 203, length 2; reason length 3 + "bye" fills one word exactly.
        let expected = bytes(fromHex: "81 CB 0002 01020304 03 627965")
        #expect(try RTCPCompoundPacket.serialized([.goodbye(bye)]) == expected)
        #expect(try RTCPCompoundPacket.parse(expected) == [.goodbye(bye)])
        #expect(bye.reasonText == "bye")
    }

    @Test func genericNACKMatchesRFC4585Figure() throws {
        // Lost 100, 101, 103 and 200: PID 100 BLP 0b101 (101, 103), PID 200 BLP 0.
        let nack = RTCPGenericNACK(senderSSRC: 0xAAAA_AAAA, mediaSSRC: 0xBBBB_BBBB, lost: [100, 101, 103, 200])
        let expected = bytes(fromHex: "81 CD 0004 AAAAAAAA BBBBBBBB 0064 0005 00C8 0000")
        #expect(try RTCPCompoundPacket.serialized([.genericNACK(nack)]) == expected)
        #expect(try RTCPCompoundPacket.parse(expected) == [.genericNACK(nack)])
        #expect(nack.lostSequenceNumbers == [100, 101, 103, 200])
    }

    @Test func genericNACKBitmaskWrapsAroundTheSequenceSpace() {
        let nack = RTCPGenericNACK(senderSSRC: 1, mediaSSRC: 2, lost: [65_535, 0, 3])
        #expect(nack.entries == [.init(packetID: 65_535, lostBitmask: 0b1001)])
        #expect(nack.lostSequenceNumbers == [65_535, 0, 3])
    }

    @Test func compoundPacketOfReportDescriptionAndGoodbyeRoundTrips() throws {
        let packets: [RTCPPacket] = [
            .receiverReport(RTCPReceiverReport(ssrc: 5, reportBlocks: [block, block])),
            .sourceDescription(RTCPSourceDescription(chunks: [.init(source: 5, items: [.cname("alice@parley")])])),
            .goodbye(RTCPGoodbye(sources: [5, 6])),
            .other(RTCPOtherPacket(type: 204, count: 3, body: [1, 2, 3, 4, 5, 6, 7, 8])),
        ]
        let bytes = try RTCPCompoundPacket.serialized(packets)
        #expect(bytes.count == RTCPCompoundPacket.serializedSize(packets))
        #expect(try RTCPCompoundPacket.parse(bytes) == packets)
    }

    @Test func paddingIsAcceptedOnTheLastPacketOnly() throws {
        // An RR with no blocks and 4 bytes of padding (P=1, length 2).
        let padded = bytes(fromHex: "A0 C9 0002 00000009 00000004")
        #expect(try RTCPCompoundPacket.parse(padded) == [.receiverReport(RTCPReceiverReport(ssrc: 9))])
        #expect(throws: WireError.malformed(.rtcpHeader, reason: "padding bit set on a packet that is not the last")) {
            try RTCPCompoundPacket.parse(padded + bytes(fromHex: "80 C9 0001 00000009"))
        }
    }

    @Test func lengthsThatOverrunTheDatagramAreRejected() {
        #expect(throws: WireError.truncated(.rtcpHeader, needed: 12, available: 8)) {
            try RTCPCompoundPacket.parse(bytes(fromHex: "81 C9 0002 00000009"))
        }
        // RC=1 claims a block the body does not hold.
        #expect(throws: WireError.truncated(.rtcpReportBlock, needed: 8, available: 4)) {
            try RTCPCompoundPacket.parse(bytes(fromHex: "81 C9 0001 00000009"))
        }
        #expect(throws: WireError.malformed(.rtcpHeader, reason: "version is not 2")) {
            try RTCPCompoundPacket.parse(bytes(fromHex: "41 C9 0001 00000009"))
        }
        #expect(throws: WireError.truncated(.rtcpHeader, needed: 4, available: 0)) {
            try RTCPCompoundPacket.parse([UInt8]())
        }
    }

    @Test func ntpTimestampFromUnixTimeAndRoundTripTime() {
        // 2024-01-01T00:00:00.5Z.
        let ntp = NTPTimestamp(unixNanoseconds: 1_704_067_200_500_000_000)
        #expect(ntp.rawValue >> 32 == 1_704_067_200 + 2_208_988_800)
        #expect(ntp.rawValue & 0xFFFF_FFFF == 0x8000_0000)

        // A sent SR at LSR, the receiver held it 1 s (DLSR 65536), the answer arrives 1.25 s after LSR.
        let lsr = NTPTimestamp(unixNanoseconds: 1_000_000_000_000)
        let arrival = NTPTimestamp(unixNanoseconds: 1_001_250_000_000)
        let answer = RTCPReportBlock(
            ssrc: 1, fractionLost: 0, cumulativeLost: 0, extendedHighestSequence: 0, jitter: 0,
            lastSenderReport: lsr.middle32, delaySinceLastSenderReport: 65_536
        )
        let rtt = answer.roundTripTime(arrival: arrival)
        #expect(rtt.map { Double($0) / 65_536 } .map { abs($0 - 0.25) < 0.001 } == true)
    }
}
