import ParleyBasics
import ParleyWire
import Testing
@testable import ParleyWebRTC

@Suite("SRTP with libsrtp2")
struct SRTPTests {
    static func rtp(sequence: UInt16, ssrc: UInt32 = 0x1234_5678, payload: [UInt8] = Array(0..<60)) throws -> [UInt8] {
        try RTPHeader(payloadType: 111, sequenceNumber: sequence, timestamp: UInt32(sequence) * 960, ssrc: ssrc).serialized(payload: payload)
    }

    static let keys: [SRTPProfile: [UInt8]] = [
        .aes128CMHMACSHA1_80: Array(1...30),
        .aeadAES128GCM: Array(1...28),
    ]

    @Test(arguments: [SRTPProfile.aes128CMHMACSHA1_80, .aeadAES128GCM])
    func whatOneSideProtectsTheOtherOpens(profile: SRTPProfile) throws {
        let sender = try #require(SRTPContext(profile: profile, keyAndSalt: Self.keys[profile]!, direction: .outbound))
        let receiver = try #require(SRTPContext(profile: profile, keyAndSalt: Self.keys[profile]!, direction: .inbound))
        for sequence in UInt16(65_530)...65_535 {
            let packet = try Self.rtp(sequence: sequence)
            var buffer = packet + [UInt8](repeating: 0, count: 32)
            let protected = try #require(buffer.withUnsafeMutableBytes { sender.protect($0, count: packet.count, rtcp: false) })
            #expect(protected == packet.count + profile.rtpOverhead)
            #expect(Array(buffer[12..<packet.count]) != Array(packet[12...]), "the payload is encrypted")
            let opened = buffer.withUnsafeMutableBytes { receiver.unprotect($0, count: protected, rtcp: false) }
            #expect(opened == .success(packet.count))
            #expect(Array(buffer.prefix(packet.count)) == packet)
        }
        let report = try RTCPCompoundPacket.serialized([.receiverReport(RTCPReceiverReport(ssrc: 7, reportBlocks: []))])
        var buffer = report + [UInt8](repeating: 0, count: 32)
        let protected = try #require(buffer.withUnsafeMutableBytes { sender.protect($0, count: report.count, rtcp: true) })
        #expect(protected == report.count + profile.rtcpOverhead)
        #expect(buffer.withUnsafeMutableBytes { receiver.unprotect($0, count: protected, rtcp: true) } == .success(report.count))
        #expect(Array(buffer.prefix(report.count)) == report)
    }

    @Test func aChangedByteOrAReplayIsRefused() throws {
        let sender = try #require(SRTPContext(profile: .aeadAES128GCM, keyAndSalt: Self.keys[.aeadAES128GCM]!, direction: .outbound))
        let receiver = try #require(SRTPContext(profile: .aeadAES128GCM, keyAndSalt: Self.keys[.aeadAES128GCM]!, direction: .inbound))
        let packet = try Self.rtp(sequence: 10)
        var buffer = packet + [UInt8](repeating: 0, count: 32)
        let count = try #require(buffer.withUnsafeMutableBytes { sender.protect($0, count: packet.count, rtcp: false) })
        var tampered = buffer
        tampered[20] ^= 1
        #expect(tampered.withUnsafeMutableBytes { receiver.unprotect($0, count: count, rtcp: false) } == .failure(.authenticationFailed))
        var copy = buffer
        #expect(buffer.withUnsafeMutableBytes { receiver.unprotect($0, count: count, rtcp: false) } == .success(packet.count))
        #expect(copy.withUnsafeMutableBytes { receiver.unprotect($0, count: count, rtcp: false) } == .failure(.replayed))
    }

    /// Two packets with one SSRC and sequence number would share an AES-GCM nonce: the second
    /// is refused (a drop), and the stream goes on.
    @Test(arguments: [SRTPProfile.aes128CMHMACSHA1_80, .aeadAES128GCM])
    func aRepeatedSequenceNumberIsNotProtectedTwice(profile: SRTPProfile) throws {
        let sender = try #require(SRTPContext(profile: profile, keyAndSalt: Self.keys[profile]!, direction: .outbound))
        func protect(_ packet: [UInt8]) -> Int? {
            var buffer = packet + [UInt8](repeating: 0, count: 32)
            return buffer.withUnsafeMutableBytes { sender.protect($0, count: packet.count, rtcp: false) }
        }
        #expect(protect(try Self.rtp(sequence: 7)) != nil)
        #expect(protect(try Self.rtp(sequence: 7, payload: Array(repeating: 9, count: 60))) == nil, "a second payload under one nonce")
        #expect(sender.repeatsRefused == 1)
        #expect(protect(try Self.rtp(sequence: 8)) != nil)
        #expect(protect(try Self.rtp(sequence: 7, ssrc: 99)) != nil, "another SSRC is another stream")
    }

    /// libsrtp makes a stream for each SSRC; the context keeps at most `maximumStreams`, checked
    /// before libsrtp sees the packet, and the streams it has keep working.
    @Test func streamsAreBoundedInBothDirections() throws {
        let key = Self.keys[.aeadAES128GCM]!
        let sender = try #require(SRTPContext(profile: .aeadAES128GCM, keyAndSalt: key, direction: .outbound, maximumStreams: 3))
        let receiver = try #require(SRTPContext(profile: .aeadAES128GCM, keyAndSalt: key, direction: .inbound, maximumStreams: 2))
        let unbounded = try #require(SRTPContext(profile: .aeadAES128GCM, keyAndSalt: key, direction: .outbound))
        func protect(ssrc: UInt32, sequence: UInt16, with context: SRTPContext) throws -> [UInt8]? {
            let packet = try Self.rtp(sequence: sequence, ssrc: ssrc)
            var buffer = packet + [UInt8](repeating: 0, count: 32)
            guard let count = buffer.withUnsafeMutableBytes({ context.protect($0, count: packet.count, rtcp: false) }) else { return nil }
            return Array(buffer.prefix(count))
        }
        for ssrc in 1...3 as ClosedRange<UInt32> { #expect(try protect(ssrc: ssrc, sequence: 1, with: sender) != nil) }
        #expect(try protect(ssrc: 4, sequence: 1, with: sender) == nil, "a fourth SSRC made a fourth stream")
        #expect(sender.streamsRefused == 1)
        #expect(try protect(ssrc: 2, sequence: 2, with: sender) != nil, "a stream it has stopped working")

        func open(ssrc: UInt32, sequence: UInt16) throws -> Result<Int, SRTPFailure> {
            var packet = try #require(try protect(ssrc: ssrc, sequence: sequence, with: unbounded))
            let count = packet.count
            return packet.withUnsafeMutableBytes { receiver.unprotect($0, count: count, rtcp: false) }
        }
        #expect(try open(ssrc: 10, sequence: 1) == .success(72))
        #expect(try open(ssrc: 11, sequence: 1) == .success(72))
        #expect(try open(ssrc: 12, sequence: 1) == .failure(.unexpectedSSRC))
        #expect(try open(ssrc: 10, sequence: 2) == .success(72))
    }

    @Test func keysOfTheWrongSizeAreRefused() {
        #expect(SRTPContext(profile: .aeadAES128GCM, keyAndSalt: Array(1...30), direction: .inbound) == nil)
    }

    /// Random and cut-short SRTP and SRTCP at an inbound context: refused, never a trap, and
    /// nothing written past the datagram.
    @Test func hostilePacketsAreRefusedWithoutTrapping() throws {
        let sender = try #require(SRTPContext(profile: .aes128CMHMACSHA1_80, keyAndSalt: Self.keys[.aes128CMHMACSHA1_80]!, direction: .outbound))
        let receiver = try #require(SRTPContext(profile: .aes128CMHMACSHA1_80, keyAndSalt: Self.keys[.aes128CMHMACSHA1_80]!, direction: .inbound))
        let packet = try Self.rtp(sequence: 1)
        var valid = packet + [UInt8](repeating: 0, count: 32)
        let count = try #require(valid.withUnsafeMutableBytes { sender.protect($0, count: packet.count, rtcp: false) })
        valid = Array(valid.prefix(count))
        var random = SplitMix64(seed: 0x5352_5450)
        var opened = 0
        for round in 0..<20_000 {
            var bytes: [UInt8]
            switch round % 3 {
            case 0: bytes = Array(valid.prefix(Int.random(in: 0...valid.count, using: &random)))
            case 1:
                bytes = valid
                bytes[Int.random(in: 0..<bytes.count, using: &random)] ^= UInt8.random(in: 1...255, using: &random)
            default:
                bytes = (0..<Int.random(in: 0...200, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                if bytes.count > 1 { bytes[0] = 0x80 | (bytes[0] & 0x3F) }
            }
            let rtcp = round % 5 == 0
            let guardBytes = [UInt8](repeating: 0xAB, count: 16)
            var buffer = bytes + guardBytes
            if case .success = buffer.withUnsafeMutableBytes({ receiver.unprotect($0, count: bytes.count, rtcp: rtcp) }) { opened += 1 }
            #expect(Array(buffer.suffix(16)) == guardBytes)
        }
        #expect(opened <= 1, "only the untouched packet opens, once")
    }
}
