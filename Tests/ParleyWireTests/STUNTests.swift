import Testing
@testable import ParleyWire
import func ParleyRelayTestSupport.bytes

/// STUN as RFC 5769's test vectors and a browser's ICE checks use it.
@Suite("STUN messages")
struct STUNTests {
    /// RFC 5769 §2.1: a binding request with SOFTWARE, PRIORITY, ICE-CONTROLLED, USERNAME
    /// "evtj:h6vY", MESSAGE-INTEGRITY (password "VOkJxbRl1RmTxUk/WvJxBt") and FINGERPRINT.
    static let sampleRequest = bytes(fromHex: """
        000100582112a442b7e7a701bc34d686fa87dfae802200105354554e20746573742063
        6c69656e74002400046e0001ff80290008932ff9b151263b3600060009657674
        6a3a68367659202020000800149aeaa70cbfd8cb56781ef2b5b2d3f249c1b571a2
        80280004e57a3bcf
        """)
    /// RFC 5769 §2.2: a binding success response mapping 192.0.2.1 port 32853.
    static let sampleIPv4Response = bytes(fromHex: """
        0101003c2112a442b7e7a701bc34d686fa87dfae8022000b7465737420766563746f7220
        002000080001a147e112a643000800142b91f599fd9e90c38c7489f92af9ba53f06be7d7
        80280004c07d4c96
        """)
    /// RFC 5769 §2.3: the same from 2001:db8:1234:5678:11:2233:4455:6677 port 32853.
    static let sampleIPv6Response = bytes(fromHex: """
        010100482112a442b7e7a701bc34d686fa87dfae8022000b7465737420766563746f7220
        002000140002a1470113a9faa5d3f179bc25f4b5bed2b9d900080014a382954e4be67bf1
        1784c97c8292c275bfe3ed4180280004c8fb0b4c
        """)

    @Test func theRFCSampleRequestReadsAsABindingRequestWithICEAttributes() throws {
        try Self.sampleRequest.withUnsafeBytes { raw in
            let message = try STUNMessageView(parsing: raw)
            #expect(message.type == .bindingRequest)
            #expect(message.transactionID == STUNTransactionID(high: 0xB7E7_A701, middle: 0xBC34_D686, low: 0xFA87_DFAE))
            #expect(message.username.map { String(decoding: $0, as: UTF8.self) } == "evtj:h6vY")
            #expect(message.priority == 0x6E00_01FF)
            #expect(message.iceRole?.isControlling == false)
            #expect(message.iceRole?.tieBreaker == 0x932F_F9B1_5126_3B36)
            #expect(message.useCandidate == false)
            #expect(message.integrity?.offset == 20 + 20 + 8 + 12 + 16)
            #expect(message.hasValidFingerprint)
            #expect(message.unknownRequiredAttribute == nil)
        }
    }

    @Test func integrityInputIsTheHeaderWithItsLengthEndingAtIntegrity() throws {
        try Self.sampleRequest.withUnsafeBytes { raw in
            let message = try STUNMessageView(parsing: raw)
            let input = message.withIntegrityInput { header, attributes in Array(header) + Array(attributes) }
            // The length field says the message ends right after MESSAGE-INTEGRITY: 0x50, not 0x58.
            #expect(input.map { Array($0.prefix(4)) } == [0x00, 0x01, 0x00, 0x50])
            #expect(input?.count == message.integrity!.offset)
            #expect(input.map { Array($0[4...]) } == Array(Self.sampleRequest[4..<message.integrity!.offset]))
        }
    }

    @Test func theRFCSampleResponsesGiveTheirMappedAddresses() throws {
        try Self.sampleIPv4Response.withUnsafeBytes { raw in
            let message = try STUNMessageView(parsing: raw)
            #expect(message.type == .bindingSuccess)
            #expect(message.xorMappedAddress == .ipv4(0xC000_0201, port: 32853))
            #expect(message.hasValidFingerprint)
        }
        try Self.sampleIPv6Response.withUnsafeBytes { raw in
            let message = try STUNMessageView(parsing: raw)
            #expect(message.xorMappedAddress == .ipv6(high: 0x2001_0DB8_1234_5678, low: 0x0011_2233_4455_6677, port: 32853))
            #expect(message.hasValidFingerprint)
        }
    }

    @Test func aWrittenResponseReadsBackWithTheSameAddressAndAValidFingerprint() throws {
        let id = STUNTransactionID(high: 1, middle: 2, low: 3)
        for address in [STUNAddress.ipv4(0x7F00_0001, port: 50_000), .ipv6(high: 0x2001_0DB8, low: 42, port: 9)] {
            var buffer = [UInt8](repeating: 0xEE, count: 128)
            var signed: [UInt8] = []
            let count = try buffer.withUnsafeMutableBytes { raw in
                var writer = try STUNMessageWriter(type: .bindingSuccess, transactionID: id, into: raw)
                try writer.appendXORMappedAddress(address)
                try writer.appendMessageIntegrity { message, output in
                    signed = Array(message)
                    for index in output.indices { output[index] = UInt8(index) }
                }
                try writer.appendFingerprint()
                return writer.count
            }
            let message = Array(buffer.prefix(count))
            try message.withUnsafeBytes { raw in
                let view = try STUNMessageView(parsing: raw)
                #expect(view.type == .bindingSuccess)
                #expect(view.transactionID == id)
                #expect(view.xorMappedAddress == address)
                #expect(view.hasValidFingerprint)
                #expect(view.integrity.map { Array($0.value) } == Array(0..<20))
                // What was signed is what a receiver's integrity input gives.
                #expect(view.withIntegrityInput { Array($0) + Array($1) } == signed)
            }
        }
    }

    @Test func messageTypesInterleaveMethodAndClass() {
        #expect(STUNMessageType.bindingRequest.rawValue == 0x0001)
        #expect(STUNMessageType.bindingSuccess.rawValue == 0x0101)
        #expect(STUNMessageType.bindingError.rawValue == 0x0111)
        #expect(STUNMessageType.bindingIndication.rawValue == 0x0011)
        for raw in stride(from: UInt16(0), through: 0x3FFF, by: 7) {
            #expect(STUNMessageType(rawValue: raw).rawValue == raw)
        }
    }

    @Test func aFlippedBitBreaksTheFingerprint() throws {
        var request = Self.sampleRequest
        request[30] ^= 0x01
        request.withUnsafeBytes { raw in
            #expect((try? STUNMessageView(parsing: raw))?.hasValidFingerprint == false)
        }
    }

    @Test func malformedMessagesAreRefused() {
        func refuses(_ bytes: [UInt8]) -> Bool {
            bytes.withUnsafeBytes { (try? STUNMessageView(parsing: $0)) == nil }
        }
        var longer = Self.sampleRequest
        longer.append(contentsOf: [0, 0, 0, 0])
        #expect(refuses(longer), "a length that does not match the datagram")
        var noCookie = Self.sampleRequest
        noCookie[4] = 0
        #expect(refuses(noCookie))
        var afterFingerprint = Self.sampleRequest
        afterFingerprint += [0x00, 0x25, 0x00, 0x00]
        afterFingerprint[3] += 4
        #expect(refuses(afterFingerprint), "nothing may follow FINGERPRINT")
        #expect(refuses([0xC0] + Array(Self.sampleRequest.dropFirst())))
    }

    @Test func crc32MatchesTheCheckValue() {
        var crc = CRC32()
        Array("123456789".utf8).withUnsafeBytes { crc.update($0) }
        #expect(crc.value == 0xCBF4_3926)
    }
}
