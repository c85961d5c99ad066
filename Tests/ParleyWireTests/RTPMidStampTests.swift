import Testing
@testable import ParleyWire

/// The MID a relay writes into each copy for a browser: what a browser reads back is the slot's
/// MID and the packet's own audio level, header, payload and padding unchanged; an element
/// under the MID's id that came with the packet never survives; and any bytes, random or cut
/// short, are refused or stamped without a trap and never past the buffer.
@Suite("RTP MID stamp")
struct RTPMidStampTests {
    static let level = AudioLevel(voiceActivity: true, level: 30)

    /// Stamps `packet` in the first `packet.count` bytes of `buffer`; the stamped packet's view
    /// (checked against what was written: it is all a caller reads afterwards), or nil (also
    /// when `packet` is not RTP).
    static func stamp(_ packet: [UInt8], in buffer: UnsafeMutableRawBufferPointer, mid: String, id: UInt8 = 4, keeping: UInt8?) -> RTPPacketView? {
        let element = RTPMidStamp.element(mid: mid, id: id)!
        guard let view = try? RTPPacketView(parsing: UnsafeRawBufferPointer(rebasing: buffer[0..<packet.count])),
              let stamped = element.withUnsafeBytes({ RTPMidStamp.stamp(view, in: buffer, midElement: $0, keepingID: keeping) }) else { return nil }
        let reparsed = try? RTPPacketView(parsing: stamped.bytes)
        #expect(reparsed.map { sameLayout($0, stamped) } == true, "the returned view is the stamped packet's")
        return stamped
    }

    static func sameLayout(_ a: RTPPacketView, _ b: RTPPacketView) -> Bool {
        a.bytes.baseAddress == b.bytes.baseAddress && a.bytes.count == b.bytes.count && a.marker == b.marker && a.payloadType == b.payloadType
            && a.sequenceNumber == b.sequenceNumber && a.timestamp == b.timestamp && a.ssrc == b.ssrc && a.csrcCount == b.csrcCount
            && a.payloadRange == b.payloadRange && a.paddingCount == b.paddingCount && a.extensionProfile == b.extensionProfile
            && a.extensionData?.baseAddress == b.extensionData?.baseAddress && a.extensionData?.count == b.extensionData?.count
    }

    /// Stamps `packet` in a buffer `room` bytes larger; the result, or nil.
    static func stamped(_ packet: [UInt8], mid: String = "7", id: UInt8 = 4, keeping: UInt8? = AudioLevel.extensionID, room: Int = RTPMidStamp.maximumGrowth) -> [UInt8]? {
        var buffer = packet + [UInt8](repeating: 0xEE, count: room)
        let count = buffer.withUnsafeMutableBytes { stamp(packet, in: $0, mid: mid, id: id, keeping: keeping)?.bytes.count }
        return count.map { Array(buffer.prefix($0)) }
    }

    @Test func aPacketWithoutExtensionGetsTheMidAndKeepsEverythingElse() throws {
        let packet = try RTPHeader(marker: true, payloadType: 111, sequenceNumber: 9, timestamp: 960, ssrc: 0xABCD, csrcs: [5])
            .serialized(payload: [1, 2, 3, 4, 5], paddingCount: 3)
        let result = try #require(Self.stamped(packet, mid: "12"))
        try RTPPacketView.withParsed(result) { view in
            #expect(view.marker && view.payloadType == 111 && view.sequenceNumber == 9 && view.timestamp == 960 && view.ssrc == 0xABCD)
            #expect(view.csrcCount == 1 && view.csrc(at: 0) == 5)
            #expect(Array(view.payload) == [1, 2, 3, 4, 5])
            #expect(view.paddingCount == 3)
            #expect(view.extensionProfile == RTPHeaderExtension.oneByteProfile)
            let elements = view.headerExtensionElements.map { ($0.id, Array($0.data)) }
            #expect(elements.count == 1 && elements[0].0 == 4 && elements[0].1 == Array("12".utf8))
        }
        #expect(result.count <= packet.count + RTPMidStamp.maximumGrowth)
    }

    @Test func theAudioLevelStaysAndAForeignMidIsReplaced() throws {
        // As a browser's packet reaches the relay: its level, its own MID under id 4, another element.
        let packet = try RTPHeader(payloadType: 111, sequenceNumber: 1, timestamp: 2, ssrc: 3, headerExtension: .elements([
            Self.level.element, RTPHeaderExtensionElement(id: 4, data: Array("0".utf8)), RTPHeaderExtensionElement(id: 3, data: [1, 2, 3]),
        ])).serialized(payload: [8, 9])
        let result = try #require(Self.stamped(packet, mid: "slot-15"))
        try RTPPacketView.withParsed(result) { view in
            #expect(view.audioLevel == Self.level)
            let mids = view.headerExtensionElements.filter { $0.id == 4 }.map { String(decoding: $0.data, as: UTF8.self) }
            #expect(mids == ["slot-15"], "one MID, the slot's")
            #expect(!view.headerExtensionElements.contains { $0.id == 3 }, "what the browser did not negotiate is dropped")
            #expect(Array(view.payload) == [8, 9])
        }
    }

    @Test func aTwoByteOrForeignBlockIsReplacedWhole() throws {
        for block in [RTPHeaderExtension.elements([RTPHeaderExtensionElement(id: 1, data: Array(repeating: 7, count: 20))]),
                      .opaque(profile: 0x1234, data: [1, 2, 3, 4, 5, 6, 7, 8])] {
            let packet = try RTPHeader(payloadType: 111, sequenceNumber: 1, timestamp: 2, ssrc: 3, headerExtension: block).serialized(payload: [6])
            let result = try #require(Self.stamped(packet))
            try RTPPacketView.withParsed(result) { view in
                #expect(view.extensionProfile == RTPHeaderExtension.oneByteProfile)
                #expect(view.headerExtensionElements.map(\.id) == [4])
                #expect(Array(view.payload) == [6])
            }
        }
    }

    @Test func withoutRoomThePacketIsRefusedAndLeftAlone() throws {
        let packet = try RTPHeader(payloadType: 111, sequenceNumber: 1, timestamp: 2, ssrc: 3).serialized(payload: [1, 2, 3])
        #expect(Self.stamped(packet, mid: "0123456789abcdef", room: 3) == nil)
        #expect(Self.stamped(packet, mid: "0", room: 8) != nil, "a one-byte MID needs 8 bytes")
    }

    @Test func onlyPlainShortMidsAndOneByteIdsMakeAnElement() {
        #expect(RTPMidStamp.element(mid: "0", id: 4) == [0x40, 0x30])
        #expect(RTPMidStamp.element(mid: "", id: 4) == nil)
        #expect(RTPMidStamp.element(mid: String(repeating: "a", count: 17), id: 4) == nil)
        #expect(RTPMidStamp.element(mid: "a b", id: 4) == nil)
        #expect(RTPMidStamp.element(mid: "é", id: 4) == nil)
        #expect(RTPMidStamp.element(mid: "1", id: 15) == nil)
        #expect(RTPMidStamp.element(mid: "1", id: 0) == nil)
    }

    @Test func anyBytesAreRefusedOrStampedWithinTheBuffer() throws {
        let examples = try [
            RTPHeader(payloadType: 111, sequenceNumber: 1, timestamp: 2, ssrc: 3).serialized(payload: [1, 2, 3]),
            RTPHeader(marker: true, payloadType: 63, sequenceNumber: 1, timestamp: 2, ssrc: 3, csrcs: [4, 5],
                      headerExtension: .elements([Self.level.element, RTPHeaderExtensionElement(id: 4, data: [0x31])]))
                .serialized(payload: [9, 9], paddingCount: 4),
        ]
        var rng = SeededGenerator(seed: 0x4D49_4453)
        var stamped = 0
        for input in ParserPropertyTests.inputs(seed: 0x4D49_4454, validExamples: examples, plausibleFirstBytes: [0x80, 0x90, 0xB0]) {
            let room = Int.random(in: 0...RTPMidStamp.maximumGrowth, using: &rng)
            let mid = String(repeating: "m", count: Int.random(in: 1...16, using: &rng))
            // A canary past the buffer: the stamp must never write there.
            var buffer = input + [UInt8](repeating: 0xEE, count: room) + [0xC5, 0xC5]
            let count = buffer.withUnsafeMutableBytes { raw in
                Self.stamp(input, in: UnsafeMutableRawBufferPointer(rebasing: raw[0..<(raw.count - 2)]), mid: mid, keeping: 1)?.bytes.count
            }
            #expect(buffer.suffix(2) == [0xC5, 0xC5])
            guard let count else {
                #expect(Array(buffer.prefix(input.count)) == input, "a refused packet is left as it was")
                continue
            }
            stamped += 1
            #expect(count <= input.count + room)
            let original = try RTPPacketView.withParsed(input) { (Array($0.payload), $0.paddingCount, $0.ssrc) }
            try RTPPacketView.withParsed(Array(buffer.prefix(count))) { view in
                #expect(Array(view.payload) == original.0 && view.paddingCount == original.1 && view.ssrc == original.2)
                #expect(view.headerExtensionElements.filter { $0.id == 4 }.map { Array($0.data) } == [Array(mid.utf8)])
            }
        }
        #expect(stamped > 100, "the generator should reach the stamping path too")
    }
}
