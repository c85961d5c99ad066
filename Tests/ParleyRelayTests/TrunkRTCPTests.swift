import NIOCore
@testable import ParleyRelay
import ParleySecurity
import ParleyWire
import Testing

/// RTCP on a trunk, as plain values with time passed in: what crosses, what stops, and how
/// much a trunk's report weighs in a talker's loss board.
@Suite("RTCP on a trunk")
struct TrunkRTCPTests {
    let second: UInt64 = 1_000_000_000
    let limits = RelayLimits()

    func makeTrunk(behind members: [ControlMessage.Roster.Member], localListeners: [(ssrc: UInt32, board: ListenerLossBoard)] = []) throws -> Trunk {
        let address = DatagramAddress(try SocketAddress(ipAddress: "127.0.0.2", port: 7800))
        let trunk = Trunk(
            id: 900, room: "r", peer: RelayPeer(address: HostAndPort(host: "127.0.0.2", port: 7800), publicKey: RelayKey().publicKey),
            destination: address, peerAddress: PeerAddress(address)!, localIndex: 1, protector: .plaintext, openedHere: true,
            workerIndex: 0, ephemeralKey: [], handshakeResponse: [], limits: limits, nowNanoseconds: second)
        trunk.setRemoteMembers(members, limits: limits, now: second)
        let receivers = localListeners.enumerated().map { index, listener in
            RoomSnapshot.Receiver(sessionID: UInt64(index + 1), destination: address, protector: .plaintext, ssrc: listener.ssrc, listenerLoss: listener.board)
        }
        trunk.forwarding = RoomSnapshot(version: 1, receivers: receivers + [trunk.receiver], remoteMemberCount: members.count)
        return trunk
    }

    func member(_ ssrc: UInt32, canPublish: Bool = true) -> ControlMessage.Roster.Member {
        ControlMessage.Roster.Member(ssrc: ssrc, identity: "m\(ssrc)", canPublish: canPublish, capabilities: [])
    }

    func bytes(_ packets: [RTCPPacket]) throws -> [UInt8] { try RTCPCompoundPacket.serialized(packets) }

    @Test func aSenderReportOfAnAnnouncedStreamCrossesRebuiltAtMostEvery400Milliseconds() throws {
        let trunk = try makeTrunk(behind: [member(7)])
        let report = try bytes([.senderReport(RTCPSenderReport(ssrc: 7, ntpTimestamp: NTPTimestamp(rawValue: 1 << 40), rtpTimestamp: 960,
                                                               packetCount: 10, octetCount: 1000, reportBlocks: [
                                                                   RTCPReportBlock(ssrc: 99, fractionLost: 255, cumulativeLost: 5, extendedHighestSequence: 1, jitter: 0),
                                                               ]))])
        guard case let .accepted(forward?) = report.withUnsafeBytes({ TrunkRTCP.receive($0, from: trunk, now: 2 * second) }) else {
            Issue.record("the sender report did not cross")
            return
        }
        let rebuilt = try RTCPCompoundPacket.parse(forward)
        guard case let .senderReport(sent) = rebuilt.first else { Issue.record("not a sender report: \(rebuilt)"); return }
        #expect(sent.ssrc == 7 && sent.packetCount == 10 && sent.reportBlocks.isEmpty, "its own figures only, no report blocks")
        #expect(report.withUnsafeBytes { TrunkRTCP.receive($0, from: trunk, now: 2 * second + 100_000_000) } == .accepted(forward: nil))
    }

    @Test func reportsForStreamsThePeerNeverAnnouncedStopHere() throws {
        let trunk = try makeTrunk(behind: [member(7), member(8, canPublish: false)])
        for ssrc: UInt32 in [8, 12345] {
            let report = try bytes([.senderReport(RTCPSenderReport(ssrc: ssrc, ntpTimestamp: NTPTimestamp(rawValue: 1), rtpTimestamp: 0, packetCount: 1, octetCount: 1))])
            #expect(report.withUnsafeBytes { TrunkRTCP.receive($0, from: trunk, now: second) } == .dropped(.foreignSSRC))
        }
        #expect([UInt8](repeating: 0x80, count: 3).withUnsafeBytes { TrunkRTCP.receive($0, from: trunk, now: second) } == .dropped(.malformed))
    }

    @Test func thePeersReportCountsOnceForEveryMemberBehindTheTrunk() throws {
        let talker = ListenerLossBoard()
        // A talker here with one local listener; three members behind the trunk.
        let trunk = try makeTrunk(behind: [member(7), member(8), member(9)], localListeners: [(ssrc: 5, board: talker), (ssrc: 6, board: ListenerLossBoard())])
        let peerReport = try bytes([.receiverReport(RTCPReceiverReport(ssrc: 4242, reportBlocks: [
            RTCPReportBlock(ssrc: 5, fractionLost: 40, cumulativeLost: 3, extendedHighestSequence: 100, jitter: 0),
        ]))])
        #expect(peerReport.withUnsafeBytes { TrunkRTCP.receive($0, from: trunk, now: second) } == .accepted(forward: nil))
        // Listeners of the talker: one here (silent) and three behind the trunk (40/256).
        #expect(talker.medianLoss(listeners: trunk.forwarding.listenersOfLocalMember, now: second) == 40)
    }

    @Test func theReportToThePeerHasABlockPerStreamWithTheWorseOfTheLegAndTheListenersHere() throws {
        let listenerBoard = ListenerLossBoard()
        let trunk = try makeTrunk(behind: [member(7)], localListeners: [(ssrc: 5, board: listenerBoard)])
        let stream = try #require(trunk.streams[7])
        // 100 packets with every tenth missing on the trunk leg.
        for sequence in UInt16(1)...100 where sequence % 10 != 0 {
            let packet = try RTPHeader(payloadType: 111, sequenceNumber: sequence, timestamp: UInt32(sequence) * 960, ssrc: 7).serialized(payload: [1, 2, 3])
            _ = packet.withUnsafeBytes { MediaAdmission.admit($0, from: &stream.media, isActive: true, nowNanoseconds: second + UInt64(sequence) * 20_000_000) }
        }
        stream.listenerLoss.record(listener: 1, fractionLost: 200, now: 3 * second)
        let report = try #require(TrunkRTCP.receiverReport(for: trunk, relaySSRC: 1, now: 3 * second))
        guard case let .receiverReport(sent) = try RTCPCompoundPacket.parse(report).first else { Issue.record("no receiver report"); return }
        #expect(sent.reportBlocks.map(\.ssrc) == [7])
        #expect(sent.reportBlocks.first?.fractionLost == 200, "the one listener here loses more than the leg's 10 %")
        let empty = try makeTrunk(behind: [])
        let keepalive = try #require(TrunkRTCP.receiverReport(for: empty, relaySSRC: 1, now: second))
        #expect(try RTCPCompoundPacket.parse(keepalive).count == 1, "with no stream, an empty report keeps the trunk alive")
    }
}
