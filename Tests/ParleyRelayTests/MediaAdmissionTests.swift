@testable import ParleyRelay
import ParleyWire
import Testing

/// The media admission decision alone, with no socket and no clock: which check a packet fails
/// first, and what passing ones leave in the sender's reception statistics.
@Suite("Media admission")
struct MediaAdmissionTests {
    static let limits: RelayLimits = {
        var limits = RelayLimits()
        limits.packetsPerSecondPerMember = 50
        limits.packetBurstPerMember = 5
        return limits
    }()

    func packet(ssrc: UInt32 = 42, sequence: UInt16) -> [UInt8] {
        try! RTPHeader(payloadType: 111, sequenceNumber: sequence, timestamp: UInt32(sequence) * 960, ssrc: ssrc)
            .serialized(payload: [1, 2, 3])
    }

    func decide(_ bytes: [UInt8], _ sender: inout MediaAdmission.Sender, active: Bool = true, at now: UInt64 = 0) -> MediaAdmission.Decision {
        // The relay parses the header once, where the packet arrives; what does not parse goes no further.
        bytes.withUnsafeBytes { raw in
            guard let view = try? RTPPacketView(parsing: raw) else { return .drop(.malformed) }
            return MediaAdmission.admit(view, from: &sender, isActive: active, nowNanoseconds: now)
        }
    }

    @Test func aValidPacketFromAnActivePublisherIsForwardedAndCounted() {
        var sender = MediaAdmission.Sender(ssrc: 42, canPublish: true, limits: Self.limits, nowNanoseconds: 0)
        for sequence in 0..<3 { #expect(decide(packet(sequence: UInt16(sequence)), &sender, at: UInt64(sequence) * 20_000_000) == .forward) }
        #expect(sender.reception?.ssrc == 42)
        #expect(sender.reception?.isValid == true)
    }

    @Test func eachCheckDropsWithItsOwnReason() {
        var sender = MediaAdmission.Sender(ssrc: 42, canPublish: true, limits: Self.limits, nowNanoseconds: 0)
        #expect(decide(packet(sequence: 1), &sender, active: false) == .drop(.notActive))
        #expect(decide(packet(ssrc: 7, sequence: 1), &sender) == .drop(.foreignSSRC))
        #expect(decide([0x80, 111, 0], &sender) == .drop(.malformed))
        var listener = MediaAdmission.Sender(ssrc: 42, canPublish: false, limits: Self.limits, nowNanoseconds: 0)
        #expect(decide(packet(sequence: 1), &listener) == .drop(.publishNotAllowed))
        #expect(sender.reception == nil, "nothing dropped was counted as received")
    }

    @Test func aSenderOverItsRateIsDroppedAndRecovers() {
        var sender = MediaAdmission.Sender(ssrc: 42, canPublish: true, limits: Self.limits, nowNanoseconds: 0)
        let burst = (0..<10).map { decide(packet(sequence: UInt16($0)), &sender, at: 0) }
        #expect(burst.filter { $0 == .forward }.count == 5)
        #expect(burst.last == .drop(.rateLimited))
        // 100 ms later, 5 more tokens at 50 per second.
        #expect(decide(packet(sequence: 10), &sender, at: 100_000_000) == .forward)
    }
}
