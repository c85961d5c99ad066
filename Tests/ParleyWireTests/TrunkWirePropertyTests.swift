import Testing
@testable import ParleyWire

/// The trunk's wire elements survive any bytes, as every parser must (``ParserPropertyTests``):
/// the trunk opening (the room a trunk is for) and the trunk init and response, which share
/// the client handshake's layout under their own first bytes.
@Suite("Trunk wire elements survive hostile bytes")
struct TrunkWirePropertyTests {
    @Test func trunkOpeningNeverTrapsAndWhatItAcceptsIsAValidRoomThatRoundTrips() throws {
        let examples = try [TrunkOpening(room: "standup").serialized(), TrunkOpening(room: String(repeating: "r", count: 64)).serialized(),
                            TrunkOpening(room: "a.b_c-9").serialized()]
        var accepted = 0
        for input in ParserPropertyTests.inputs(seed: 0x5452_554E, validExamples: examples, plausibleFirstBytes: [TrunkOpening.version]) {
            guard let opening = input.withUnsafeBytes({ try? TrunkOpening(parsing: $0) }) else { continue }
            accepted += 1
            #expect(ParleyNames.problem(withRoom: opening.room) == nil, "input \(input)")
            #expect(try opening.serialized() == input, "a trunk opening has one encoding")
        }
        #expect(accepted >= examples.count)
    }

    @Test func anInvalidRoomIsNeitherWrittenNorRead() throws {
        #expect(throws: WireError.self) { try TrunkOpening(room: "no spaces").serialized() }
        #expect(throws: WireError.self) { try TrunkOpening(room: "").serialized() }
        let bytes: [UInt8] = [TrunkOpening.version, 3] + Array("a b".utf8)
        #expect(throws: WireError.self) { try bytes.withUnsafeBytes { try TrunkOpening(parsing: $0) } }
        let trailing = try TrunkOpening(room: "ok").serialized() + [0]
        #expect(throws: WireError.self) { try trailing.withUnsafeBytes { try TrunkOpening(parsing: $0) } }
    }

    @Test func trunkHandshakeMessagesNeverTrapAndAreNeverTakenForAClientsOrTheReverse() throws {
        let initHeader = try [UInt8](serializedSize: HandshakeInit.headerSize) { (w: inout ByteWriter) throws(WireError) in
            try HandshakeInit.writeHeader(to: &w, senderIndex: 5, cookie: [UInt8](repeating: 3, count: 16), type: .trunkInit)
        }
        let responseHeader = try [UInt8](serializedSize: HandshakeResponse.headerSize) { (w: inout ByteWriter) throws(WireError) in
            try HandshakeResponse.writeHeader(to: &w, receiverIndex: 5, type: .trunkResponse)
        }
        let examples = [initHeader + [UInt8](repeating: 4, count: 150), responseHeader + [UInt8](repeating: 5, count: 60)]
        var accepted = 0
        for input in ParserPropertyTests.inputs(seed: 0x5452_4B48, validExamples: examples, plausibleFirstBytes: [0x53, 0x54, 0x56, 0x57]) {
            input.withUnsafeBytes { raw in
                #expect(PacketKind(raw) == .handshake || raw.first.map { ![0x53, 0x54, 0x56, 0x57].contains($0) } ?? true)
                if let value = try? HandshakeInit(parsing: raw, type: .trunkInit) {
                    accepted += 1
                    #expect(raw.first == SecureMessageType.trunkInit.rawValue)
                    #expect(value.noiseMessage.count + HandshakeInit.headerSize == raw.count)
                    #expect((try? HandshakeInit(parsing: raw)) == nil, "a trunk init is not a client's")
                }
                if let value = try? HandshakeResponse(parsing: raw, type: .trunkResponse) {
                    accepted += 1
                    #expect(raw.first == SecureMessageType.trunkResponse.rawValue)
                    #expect(value.noiseMessage.count + HandshakeResponse.headerSize == raw.count)
                    #expect((try? HandshakeResponse(parsing: raw)) == nil, "a trunk response is not a client's")
                }
            }
        }
        #expect(accepted > 1_000)
    }
}
