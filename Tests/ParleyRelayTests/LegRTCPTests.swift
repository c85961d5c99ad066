import NIOCore
@testable import ParleyRelay
import ParleyDatagrams
import ParleySecurity
import ParleyWire
import Testing

/// RTCP terminated per leg (``LegRTCP``), with no socket and no clock, for both kinds of leg:
/// what goes on to the room, what stops here, how much a leg's report weighs in a talker's loss
/// board, and what the relay reports to the leg about the streams that arrive over it.
@Suite("RTCP, terminated per leg")
struct LegRTCPTests {
    static let millisecond: UInt64 = 1_000_000
    let second: UInt64 = 1_000_000_000
    let limits = RelayLimits()

    func member(ssrc: UInt32 = 7, canPublish: Bool = true, active: Bool = true) -> MemberLeg {
        let address = DatagramAddress(try! SocketAddress(ipAddress: "127.0.0.1", port: 4000))
        let member = MemberLeg(
            id: 1, address: address, peer: PeerAddress(address)!, room: "standup", identity: "ada", ssrc: ssrc,
            canPublish: canPublish, cookie: 9, token: "t", workerIndex: 0, limits: RelayLimits(), nowNanoseconds: 0)
        if active { member.state = .active }
        return member
    }

    func makeTrunk(behind members: [ControlMessage.Roster.Member], localListeners: [(ssrc: UInt32, board: ListenerLossBoard)] = []) throws -> TrunkLeg {
        let address = DatagramAddress(try SocketAddress(ipAddress: "127.0.0.2", port: 7800))
        let trunk = TrunkLeg(
            id: 900, room: "r", peer: RelayPeer(address: HostAndPort(host: "127.0.0.2", port: 7800), publicKey: RelayKey().publicKey),
            destination: address, peerAddress: PeerAddress(address)!, localIndex: 1, transport: PlaintextTransport.shared, openedHere: true,
            workerIndex: 0, ephemeralKey: [], handshakeResponse: [], limits: limits, nowNanoseconds: second)
        trunk.setRemoteMembers(members, limits: limits, now: second)
        let receivers = localListeners.enumerated().map { index, listener in
            RoomSnapshot.Receiver(legID: UInt64(index + 1), destination: address, transport: PlaintextTransport.shared, ssrc: listener.ssrc,
                                  listenerLoss: listener.board)
        }
        trunk.forwarding = RoomSnapshot(version: 1, receivers: receivers + [trunk.receiver], remoteMemberCount: members.count)
        return trunk
    }

    func rosterMember(_ ssrc: UInt32, canPublish: Bool = true) -> ControlMessage.Roster.Member {
        ControlMessage.Roster.Member(ssrc: ssrc, identity: "m\(ssrc)", canPublish: canPublish, capabilities: [])
    }

    func senderReport(ssrc: UInt32, blocks: [RTCPReportBlock] = []) -> [UInt8] {
        try! RTCPCompoundPacket.serialized([.senderReport(RTCPSenderReport(
            ssrc: ssrc, ntpTimestamp: NTPTimestamp(rawValue: 1 << 40), rtpTimestamp: 960, packetCount: 10, octetCount: 800,
            reportBlocks: blocks))])
    }

    func receive(_ bytes: [UInt8], from leg: Leg, at now: UInt64) -> LegRTCP.Outcome {
        bytes.withUnsafeBytes { LegRTCP.receive($0, from: leg, now: now) }
    }

    /// The relay's report to `leg`, parsed; nil when it writes none.
    func report(to leg: Leg, at now: UInt64, keepalive: Bool = false) throws -> [RTCPPacket]? {
        var buffer = [UInt8](repeating: 0, count: LegRTCP.maximumReportSize)
        let count = buffer.withUnsafeMutableBytes { LegRTCP.writeReceiverReport(for: leg, relaySSRC: 99, now: now, keepalive: keepalive, into: $0) }
        guard count > 0 else { return nil }
        let bytes = Array(buffer[..<count])
        let packets = try RTCPCompoundPacket.parse(bytes)
        #expect(try RTCPCompoundPacket.serialized(packets) == bytes, "written as the serialiser would write it")
        return packets
    }

    func admit(_ sequence: UInt16, ssrc: UInt32, into stream: LegStream, at now: UInt64) throws -> MediaAdmission.Decision {
        let packet = try RTPHeader(payloadType: 111, sequenceNumber: sequence, timestamp: UInt32(sequence) * 960, ssrc: ssrc).serialized(payload: [1, 2, 3])
        return try packet.withUnsafeBytes { MediaAdmission.admit(try RTPPacketView(parsing: $0), from: &stream.media, isActive: true, nowNanoseconds: now) }
    }

    // MARK: A member's leg

    @Test func aMembersSenderReportGoesOnRebuiltAtMostOncePerInterval() throws {
        let ada = member()
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
        #expect(receive(senderReport(ssrc: 8), from: member(), at: 0) == .dropped(.foreignSSRC))
        #expect(receive(senderReport(ssrc: 7), from: member(active: false), at: 0) == .dropped(.notActive))
        #expect(receive([0x80, 200, 0], from: member(), at: 0) == .dropped(.malformed))
    }

    @Test func aListenerOnlyMemberSenderReportIsNotForwarded() {
        #expect(receive(senderReport(ssrc: 7), from: member(canPublish: false), at: 0) == .accepted(nacks: 0, forward: nil))
    }

    @Test func noReceiverReportToAMemberBeforeItsStreamHasPackets() throws {
        #expect(try report(to: member(), at: 0) == nil)
    }

    @Test func theReceiverReportToAMemberNamesTheRelayAndItsStream() throws {
        let ada = member()
        for sequence in 0..<20 {
            #expect(try admit(UInt16(sequence), ssrc: 7, into: ada.stream, at: UInt64(sequence) * 20 * Self.millisecond) == .forward)
        }
        let packets = try #require(try report(to: ada, at: 400 * Self.millisecond))
        guard case let .receiverReport(report) = packets.first else { Issue.record("a receiver report"); return }
        #expect(report.ssrc == 99)
        #expect(report.reportBlocks.map(\.ssrc) == [7])
        #expect(report.reportBlocks.first?.fractionLost == 0, "nothing was lost")
        let interval = LegRTCP.receiverReportIntervalNanoseconds
        let now: UInt64 = 400 * Self.millisecond
        let next = LegRTCP.nextReceiverReport(after: now)
        #expect((now + interval / 2...now + interval * 3 / 2).contains(next), "the next is due half to one and a half intervals on")
    }

    // MARK: A trunk's leg

    @Test func aSenderReportOfAnAnnouncedStreamCrossesATrunkRebuiltAtMostEvery400Milliseconds() throws {
        let trunk = try makeTrunk(behind: [rosterMember(7)])
        let report = senderReport(ssrc: 7, blocks: [
            RTCPReportBlock(ssrc: 99, fractionLost: 255, cumulativeLost: 5, extendedHighestSequence: 1, jitter: 0),
        ])
        guard case let .accepted(_, forward?) = receive(report, from: trunk, at: 2 * second) else {
            Issue.record("the sender report did not cross")
            return
        }
        let rebuilt = try RTCPCompoundPacket.parse(forward)
        guard case let .senderReport(sent) = rebuilt.first else { Issue.record("not a sender report: \(rebuilt)"); return }
        #expect(sent.ssrc == 7 && sent.packetCount == 10 && sent.reportBlocks.isEmpty, "its own figures only, no report blocks")
        #expect(receive(report, from: trunk, at: 2 * second + 100_000_000) == .accepted(nacks: 0, forward: nil))
    }

    @Test func reportsForStreamsThePeerNeverAnnouncedStopHere() throws {
        let trunk = try makeTrunk(behind: [rosterMember(7), rosterMember(8, canPublish: false)])
        for ssrc: UInt32 in [8, 12345] {
            #expect(receive(senderReport(ssrc: ssrc), from: trunk, at: second) == .dropped(.foreignSSRC))
        }
        #expect(receive([0x80, 0x80, 0x80], from: trunk, at: second) == .dropped(.malformed))
    }

    @Test func thePeersReportCountsOnceForEveryMemberBehindTheTrunk() throws {
        let talker = ListenerLossBoard()
        // A talker here with one local listener; three members behind the trunk.
        let trunk = try makeTrunk(behind: [rosterMember(7), rosterMember(8), rosterMember(9)],
                                  localListeners: [(ssrc: 5, board: talker), (ssrc: 6, board: ListenerLossBoard())])
        let peerReport = try RTCPCompoundPacket.serialized([.receiverReport(RTCPReceiverReport(ssrc: 4242, reportBlocks: [
            RTCPReportBlock(ssrc: 5, fractionLost: 40, cumulativeLost: 3, extendedHighestSequence: 100, jitter: 0),
        ]))])
        #expect(receive(peerReport, from: trunk, at: second) == .accepted(nacks: 0, forward: nil))
        // Listeners of the talker: one here (silent) and three behind the trunk (40/256).
        #expect(talker.medianLoss(listeners: trunk.forwarding.listenersOfLocalMember, now: second) == 40)
    }

    @Test func theReportToThePeerHasABlockPerStreamWithTheWorseOfTheLegAndTheListenersHere() throws {
        let trunk = try makeTrunk(behind: [rosterMember(7)], localListeners: [(ssrc: 5, board: ListenerLossBoard())])
        let stream = try #require(trunk.streamsBySSRC[7])
        // 100 packets with every tenth missing on the trunk leg.
        for sequence in UInt16(1)...100 where sequence % 10 != 0 {
            _ = try admit(sequence, ssrc: 7, into: stream, at: second + UInt64(sequence) * 20_000_000)
        }
        stream.listenerLoss.record(listener: 1, fractionLost: 200, now: 3 * second)
        let packets = try #require(try report(to: trunk, at: 3 * second, keepalive: true))
        guard case let .receiverReport(sent) = packets.first else { Issue.record("no receiver report"); return }
        #expect(sent.reportBlocks.map(\.ssrc) == [7])
        #expect(sent.reportBlocks.first?.fractionLost == 200, "the one listener here loses more than the leg's 10 %")
        let keepalive = try #require(try report(to: try makeTrunk(behind: []), at: second, keepalive: true))
        #expect(keepalive.count == 1, "with no stream, an empty report keeps the trunk alive")
    }

    @Test func manyStreamsFillSeveralReportsOfAtMost31Blocks() throws {
        let trunk = try makeTrunk(behind: (1...40).map { rosterMember(UInt32($0)) })
        for ssrc in UInt32(1)...40 {
            let stream = try #require(trunk.streamsBySSRC[ssrc])
            for sequence in UInt16(1)...3 { _ = try admit(sequence, ssrc: ssrc, into: stream, at: second + UInt64(sequence) * 20_000_000) }
        }
        let packets = try #require(try report(to: trunk, at: 2 * second, keepalive: true))
        let blocks = packets.map { packet -> Int in
            guard case let .receiverReport(report) = packet else { return -1 }
            return report.reportBlocks.count
        }
        #expect(blocks == [31, 9])
    }
}
