import NIOCore
@testable import ParleyRelay
import ParleyWire
import Testing

/// A member's RTCP at the relay, with no socket and no clock: what goes on to the room, what
/// stops here, and what the relay tells the member about its own stream.
@Suite("A member's RTCP, terminated at the relay")
struct MemberRTCPTests {
    static let millisecond: UInt64 = 1_000_000

    func session(ssrc: UInt32 = 7, canPublish: Bool = true, active: Bool = true) -> Session {
        let address = DatagramAddress(try! SocketAddress(ipAddress: "127.0.0.1", port: 4000))
        let session = Session(
            id: 1, address: address, peer: PeerAddress(address)!, room: "standup", identity: "ada", ssrc: ssrc,
            canPublish: canPublish, cookie: 9, token: "t", workerIndex: 0, limits: RelayLimits(), nowNanoseconds: 0)
        if active { session.state = .active }
        return session
    }

    func senderReport(ssrc: UInt32, blocks: [RTCPReportBlock] = []) -> [UInt8] {
        try! RTCPCompoundPacket.serialized([.senderReport(RTCPSenderReport(
            ssrc: ssrc, ntpTimestamp: NTPTimestamp(rawValue: 1 << 40), rtpTimestamp: 960, packetCount: 10, octetCount: 800,
            reportBlocks: blocks))])
    }

    func receive(_ bytes: [UInt8], from session: Session, at now: UInt64) -> MemberRTCP.Outcome {
        bytes.withUnsafeBytes { MemberRTCP.receive($0, from: session, now: now) }
    }

    @Test func aSenderReportGoesOnRebuiltAtMostOncePerInterval() throws {
        let ada = session()
        guard case let .accepted(_, forward?) = receive(senderReport(ssrc: 7), from: ada, at: 1_000 * Self.millisecond) else {
            Issue.record("the first sender report is forwarded")
            return
        }
        let packets = try RTCPCompoundPacket.parse(forward)
        guard case let .senderReport(report) = packets.first else { Issue.record("a sender report"); return }
        #expect(report.ssrc == 7 && report.packetCount == 10 && report.reportBlocks.isEmpty)
        #expect(receive(senderReport(ssrc: 7), from: ada, at: 1_100 * Self.millisecond) == .accepted(nacks: 0, forward: nil),
                "a second one within the interval stops here")
        guard case .accepted(_, _?) = receive(senderReport(ssrc: 7), from: ada, at: 1_500 * Self.millisecond) else {
            Issue.record("after the interval, the next goes on")
            return
        }
    }

    @Test func reportsClaimingAnotherMembersSSRCOrFromAJoiningMemberStopHere() {
        #expect(receive(senderReport(ssrc: 8), from: session(), at: 0) == .dropped(.foreignSSRC))
        #expect(receive(senderReport(ssrc: 7), from: session(active: false), at: 0) == .dropped(.notActive))
        #expect(receive([0x80, 200, 0], from: session(), at: 0) == .dropped(.malformed))
    }

    @Test func aListenerOnlyMemberSenderReportIsNotForwarded() {
        #expect(receive(senderReport(ssrc: 7), from: session(canPublish: false), at: 0) == .accepted(nacks: 0, forward: nil))
    }

    @Test func noReceiverReportBeforeTheStreamHasPackets() {
        #expect(MemberRTCP.receiverReport(for: session(), relaySSRC: 99, now: 0) == nil)
    }

    @Test func theReceiverReportNamesTheRelayAndTheMembersStreamAndSchedulesTheNext() throws {
        let ada = session()
        for sequence in 0..<20 {
            let packet = try RTPHeader(payloadType: 111, sequenceNumber: UInt16(sequence), timestamp: UInt32(sequence) * 960, ssrc: 7)
                .serialized(payload: [1])
            let now = UInt64(sequence) * 20 * Self.millisecond
            #expect(packet.withUnsafeBytes { MediaAdmission.admit($0, from: &ada.media, isActive: true, nowNanoseconds: now) } == .forward)
        }
        let now = 400 * Self.millisecond
        let bytes = try #require(MemberRTCP.receiverReport(for: ada, relaySSRC: 99, now: now))
        guard case let .receiverReport(report) = try RTCPCompoundPacket.parse(bytes).first else { Issue.record("a receiver report"); return }
        #expect(report.ssrc == 99)
        #expect(report.reportBlocks.map(\.ssrc) == [7])
        #expect(report.reportBlocks.first?.fractionLost == 0, "nothing was lost")
        let interval = MemberRTCP.receiverReportIntervalNanoseconds
        #expect((now + interval / 2...now + interval * 3 / 2).contains(ada.nextReceiverReportNanoseconds))
    }
}
