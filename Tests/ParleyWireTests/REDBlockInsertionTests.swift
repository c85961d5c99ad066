import Testing
@testable import ParleyWire

/// A block the relay adds to a browser's RED copy: what the browser reads back is the sender's
/// header and blocks unchanged, the new block among them by age under the primary's payload
/// type; a packet it cannot complete is left as it was; and any bytes, random or cut short,
/// are refused or completed without a trap and never past the buffer.
@Suite("RED block insertion")
struct REDBlockInsertionTests {
    static let level = AudioLevel(voiceActivity: true, level: 30)

    /// A RED packet as a `parley` sender makes it: copies 3 and 1 frames back, then the primary.
    static func senderPacket(redundant: [OwnedREDPayload.Block]? = nil, paddingCount: Int = 0) throws -> [UInt8] {
        let payload = OwnedREDPayload(
            redundant: redundant ?? [.init(payloadType: 111, timestampOffset: 2_880, data: [3, 3, 3]),
                                     .init(payloadType: 111, timestampOffset: 960, data: [1])],
            primary: .init(payloadType: 111, timestampOffset: 0, data: [0, 0, 0, 0]))
        return try RTPHeader(marker: true, payloadType: 63, sequenceNumber: 7, timestamp: 48_000, ssrc: 0xABCD,
                             headerExtension: .elements([level.element]))
            .serialized(payload: try payload.serialized(), paddingCount: paddingCount)
    }

    /// Inserts `block` into `packet` in a buffer `room` bytes larger; the result, or nil (also
    /// when `packet` is not RTP).
    static func inserted(_ block: [UInt8], offset: UInt16, into packet: [UInt8], room: Int = 600) -> [UInt8]? {
        var buffer = packet + [UInt8](repeating: 0xEE, count: room)
        let count = buffer.withUnsafeMutableBytes { raw -> Int? in
            guard let view = try? RTPPacketView(parsing: UnsafeRawBufferPointer(rebasing: raw[0..<packet.count])) else { return nil }
            return block.withUnsafeBytes { REDPayload.insert($0, timestampOffset: offset, into: view, in: raw) }
        }
        return count.map { Array(buffer.prefix($0)) }
    }

    @Test func theCopyTwoBackGoesBetweenTheOlderAndTheNewerCopy() throws {
        let packet = try Self.senderPacket()
        let result = try #require(Self.inserted([2, 2], offset: 1_920, into: packet))
        #expect(result.count == packet.count + 4 + 2)
        try RTPPacketView.withParsed(result) { view in
            #expect(view.marker && view.payloadType == 63 && view.sequenceNumber == 7 && view.timestamp == 48_000 && view.ssrc == 0xABCD)
            #expect(view.audioLevel == Self.level)
        }
        let red = try Self.redPayload(of: result)
        #expect(red.redundant == [.init(payloadType: 111, timestampOffset: 2_880, data: [3, 3, 3]),
                                  .init(payloadType: 111, timestampOffset: 1_920, data: [2, 2]),
                                  .init(payloadType: 111, timestampOffset: 960, data: [1])])
        #expect(red.primary == .init(payloadType: 111, timestampOffset: 0, data: [0, 0, 0, 0]))
    }

    @Test func theBlockTakesItsPlaceByAgeWhereverThatIs() throws {
        // Older than every copy: first. Younger than every copy: just before the primary.
        let oldest = try #require(Self.inserted([9], offset: 3_840, into: try Self.senderPacket()))
        let youngest = try #require(Self.inserted([9], offset: 480, into: try Self.senderPacket()))
        let onlyPrimary = try #require(Self.inserted([9], offset: 1_920, into: try Self.senderPacket(redundant: [])))
        #expect(try Self.redPayload(of: oldest).redundant.map(\.timestampOffset) == [3_840, 2_880, 960])
        #expect(try Self.redPayload(of: youngest).redundant.map(\.timestampOffset) == [2_880, 960, 480])
        let red = try Self.redPayload(of: onlyPrimary)
        #expect(red.redundant == [.init(payloadType: 111, timestampOffset: 1_920, data: [9])])
        #expect(red.primary.data == [0, 0, 0, 0])
    }

    /// The RED payload of an RTP packet.
    static func redPayload(of packet: [UInt8]) throws -> OwnedREDPayload {
        let payload = try RTPPacketView.withParsed(packet) { Array($0.payload) }
        return try OwnedREDPayload(parsing: payload)
    }

    @Test func aPacketItCannotCompleteIsLeftAsItWas() throws {
        let packet = try Self.senderPacket()
        #expect(Self.inserted([2], offset: 960, into: packet) == nil, "a copy from that frame is there already")
        #expect(Self.inserted([2], offset: 0, into: packet) == nil, "the primary's own offset")
        #expect(Self.inserted([2], offset: 0x4000, into: packet) == nil, "beyond 14 bits")
        #expect(Self.inserted([], offset: 1_920, into: packet) == nil)
        #expect(Self.inserted([UInt8](repeating: 1, count: 1_024), offset: 1_920, into: packet, room: 2_000) == nil, "beyond 10 bits")
        #expect(Self.inserted([2, 2], offset: 1_920, into: packet, room: 5) == nil, "no room")
        #expect(Self.inserted([2], offset: 1_920, into: try Self.senderPacket(paddingCount: 4)) == nil, "padding")
        // Headers that promise more data than follows.
        var short = packet
        short.removeLast(6)
        #expect(Self.inserted([2], offset: 1_920, into: short) == nil)
    }

    @Test func anyBytesAreRefusedOrCompletedWithinTheBuffer() throws {
        let examples = try [Self.senderPacket(), Self.senderPacket(redundant: [])]
        var completed = 0
        for input in ParserPropertyTests.inputs(seed: 0x5245_4449, validExamples: examples, plausibleFirstBytes: [0x80, 0x90, 0xA0]) {
            let room = 16
            guard let result = Self.inserted([5, 5, 5], offset: 1_920, into: input, room: room) else { continue }
            completed += 1
            #expect(result.count == input.count + 7)
            #expect(Array(result.prefix(12)) == Array(input.prefix(12)), "the fixed header is never touched")
            let red = try Self.redPayload(of: result)
            #expect(red.redundant.contains(.init(payloadType: red.primary.payloadType, timestampOffset: 1_920, data: [5, 5, 5])))
        }
        #expect(completed > 10, "the generator should reach the completing path too")
    }
}
