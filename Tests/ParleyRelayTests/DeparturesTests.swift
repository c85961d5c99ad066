import NIOCore
@testable import ParleyRelay
import ParleyDatagrams
import ParleyWire
import Testing

/// Departed members, with no socket and no clock: the goodbye is repeated until acknowledged,
/// an idle member is told once, and the address is forgotten after a while.
@Suite("Departures")
struct DeparturesTests {
    static let millisecond: UInt64 = 1_000_000

    func member() -> MemberLeg {
        let address = DatagramAddress(try! SocketAddress(ipAddress: "127.0.0.1", port: 4001))
        return MemberLeg(id: 3, address: address, peer: PeerAddress(address)!, room: "standup", identity: "bo", ssrc: 5,
                         canPublish: true, cookie: 1, token: "t", workerIndex: 0, limits: RelayLimits(), nowNanoseconds: 0)
    }

    @Test func aGoodbyeIsRepeatedUntilTheMemberAcknowledgesIt() throws {
        let bo = member()
        var departures = Departures()
        let goodbye = Departures.goodbye(to: bo, reason: .shutdown, tellMember: true, now: 0)
        let bytes = try #require(goodbye.bytes)
        let message = try ControlMessage(parsing: bytes)
        guard case let .goodbye(body) = message.body else { Issue.record("a goodbye"); return }
        #expect(body.reason == .relayShuttingDown && message.isReliable)
        departures.record(bo, goodbye: goodbye.sender, now: 0)
        #expect(departures.unacknowledgedGoodbyes == 1)
        #expect(departures.due(now: 300 * Self.millisecond).map(\.bytes) == [bytes], "repeated after the retransmit interval")
        departures.acknowledge(bo.peer, sequence: message.sequence)
        #expect(departures.unacknowledgedGoodbyes == 0)
        #expect(departures.due(now: 600 * Self.millisecond).isEmpty)
        #expect(departures[bo.peer] != nil, "the address is still known, to ack a retransmitted leave")
        _ = departures.due(now: Departures.lifetimeNanoseconds + 1)
        #expect(departures[bo.peer] == nil, "and forgotten after its lifetime")
    }

    @Test func anIdleMemberIsToldOnceAndOneWhoLeftIsNotTold() {
        let bo = member()
        var departures = Departures()
        let idle = Departures.goodbye(to: bo, reason: .idleTimeout, tellMember: true, now: 0)
        #expect(idle.bytes != nil)
        departures.record(bo, goodbye: idle.sender, now: 0)
        #expect(departures.due(now: 300 * Self.millisecond).isEmpty, "no repeat: it is probably gone")
        #expect(Departures.goodbye(to: bo, reason: .left, tellMember: true, now: 0).bytes == nil)
        #expect(Departures.goodbye(to: bo, reason: .shutdown, tellMember: false, now: 0).bytes == nil)
    }
}
