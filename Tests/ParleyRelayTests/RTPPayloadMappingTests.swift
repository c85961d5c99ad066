@testable import ParleyRelay
import ParleyWire
import Testing

/// A browser whose numbers for Opus, RED and the audio level are not Parley's: what it
/// receives carries its own numbers everywhere they appear (the header, RED's block headers,
/// the level element) with nothing else changed, what it sends reaches the room as Parley's,
/// and what it did not negotiate never reaches it.
@Suite("RTP payload mapping")
struct RTPPayloadMappingTests {
    /// Opus 109, RED 120, the audio level under id 3, as a browser other than Chromium may offer.
    static let other = RTPPayloadMapping(opus: 109, red: 120, audioLevelID: 3)
    static let level = AudioLevel(voiceActivity: true, level: 42)

    /// A RED packet as a `parley` sender makes it, its level and another element in the header.
    static func parleyPacket() throws -> [UInt8] {
        let payload = try OwnedREDPayload(
            redundant: [.init(payloadType: RTPHeader.opusPayloadType, timestampOffset: 960, data: [7, 7, 7])],
            primary: .init(payloadType: RTPHeader.opusPayloadType, timestampOffset: 0, data: [1, 2, 3, 4])).serialized()
        return try RTPHeader(marker: true, payloadType: RTPHeader.redPayloadType, sequenceNumber: 5, timestamp: 9_600, ssrc: 0xBEEF,
                             headerExtension: .elements([level.element, RTPHeaderExtensionElement(id: 5, data: [0xAA, 0xBB])]))
            .serialized(payload: payload)
    }

    /// `packet` renumbered for the browser, and the view `toBrowser` handed on; nil if refused.
    static func toBrowser(_ packet: [UInt8], _ mapping: RTPPayloadMapping) throws -> (bytes: [UInt8], payloadType: UInt8)? {
        var buffer = packet
        let payloadType = try buffer.withUnsafeMutableBytes { buffer in
            mapping.toBrowser(try RTPPacketView(parsing: UnsafeRawBufferPointer(buffer)), in: buffer)?.payloadType
        }
        return payloadType.map { (buffer, $0) }
    }

    @Test func aBrowserWithOtherNumbersReadsItsOwnEverywhereAndNothingElseChanges() throws {
        let packet = try Self.parleyPacket()
        let renumbered = try #require(try Self.toBrowser(packet, Self.other))
        #expect(renumbered.payloadType == 120, "the view handed on says what the packet now says")
        try RTPPacketView.withParsed(renumbered.bytes) { view in
            #expect(view.payloadType == 120 && view.marker && view.sequenceNumber == 5 && view.timestamp == 9_600 && view.ssrc == 0xBEEF)
            let elements = view.headerExtensionElements.map { ($0.id, Array($0.data)) }
            #expect(elements.map(\.0) == [3, 5], "the level under the browser's id, the other element as it was")
            #expect(elements[0].1 == Self.level.element.data, "the level itself unchanged")
            let red = try OwnedREDPayload(parsing: Array(view.payload))
            #expect(red.redundant == [.init(payloadType: 109, timestampOffset: 960, data: [7, 7, 7])])
            #expect(red.primary == .init(payloadType: 109, timestampOffset: 0, data: [1, 2, 3, 4]))
        }
        #expect(renumbered.bytes.count == packet.count)

        var back = renumbered.bytes
        let taken = back.withUnsafeMutableBytes { Self.other.toParley($0) }
        #expect(taken && back == packet, "what the browser sends reaches the room as Parley's")
    }

    @Test func withParleysNumbersThePacketPassesUntouched() throws {
        let packet = try Self.parleyPacket()
        let chromium = RTPPayloadMapping(opus: RTPHeader.opusPayloadType, red: RTPHeader.redPayloadType, audioLevelID: AudioLevel.extensionID)
        let passed = try #require(try Self.toBrowser(packet, chromium))
        #expect(passed.bytes == packet && passed.payloadType == RTPHeader.redPayloadType)
    }

    @Test func whatTheBrowserDidNotNegotiateNeverReachesIt() throws {
        let withoutRED = RTPPayloadMapping(opus: 109, red: nil, audioLevelID: 3)
        #expect(try Self.toBrowser(try Self.parleyPacket(), withoutRED) == nil, "RED to a browser that does not take it")
        let pcmu = try RTPHeader(payloadType: 0, sequenceNumber: 1, timestamp: 2, ssrc: 3).serialized(payload: [1, 2])
        #expect(try Self.toBrowser(pcmu, Self.other) == nil)
        var fromBrowser = pcmu
        let taken = fromBrowser.withUnsafeMutableBytes { Self.other.toParley($0) }
        #expect(!taken, "nor does the room take it from the browser")
    }
}
