@testable import ParleyRelay
import ParleyWire
import Testing

/// A room spread over relays, as plain values: the roster is the room's (members here and
/// behind trunks), and an SSRC two relays both gave out is settled the same way on each.
@Suite("A room across relays")
struct RoomAcrossRelaysTests {
    let lowKey = [UInt8](repeating: 1, count: 32)
    let highKey = [UInt8](repeating: 9, count: 32)

    func local(_ id: UInt64, _ identity: String, ssrc: UInt32) -> Room.Member {
        Room.Member(sessionID: id, identity: identity, ssrc: ssrc, canPublish: true)
    }

    func remote(_ identity: String, ssrc: UInt32) -> ControlMessage.Roster.Member {
        ControlMessage.Roster.Member(ssrc: ssrc, identity: identity, canPublish: true, capabilities: [])
    }

    func roomWithAda(trunk peerKey: [UInt8]) -> Room {
        var room = Room(name: "r")
        _ = room.admit(local(1, "ada", ssrc: 7), maximumMembers: 5)
        room.activate(sessionID: 1)
        room.attachTrunk(id: 100, peerKey: peerKey)
        return room
    }

    @Test func theRosterHoldsTheMembersHereAndBehindEachTrunkWhileTheTrunkIsToldOnlyTheMembersHere() {
        var room = roomWithAda(trunk: highKey)
        let before = room.version
        let outcome = room.setRemoteMembers([remote("bob", ssrc: 8), remote("cy", ssrc: 9)], trunkID: 100, localKey: lowKey)
        #expect(outcome == Room.RemoteRosterOutcome())
        #expect(room.roster.map(\.identity) == ["ada", "bob", "cy"])
        #expect(room.localRoster.map(\.identity) == ["ada"])
        #expect(room.version != before, "members see the new roster")
        #expect(room.remoteMemberCount == 2)
        let unchanged = room.version
        _ = room.setRemoteMembers([remote("bob", ssrc: 8), remote("cy", ssrc: 9)], trunkID: 100, localKey: lowKey)
        #expect(room.version == unchanged, "the same roster again changes nothing")
        let changed = room.detachTrunk(id: 100)
        #expect(changed)
        #expect(room.roster.map(\.identity) == ["ada"])
    }

    @Test func aJoinWithAnSSRCHeldOnAnotherRelayIsRefused() {
        var room = roomWithAda(trunk: highKey)
        _ = room.setRemoteMembers([remote("bob", ssrc: 8)], trunkID: 100, localKey: lowKey)
        guard case let .refused(code, message) = room.admit(local(2, "dee", ssrc: 8), maximumMembers: 5) else {
            Issue.record("a join with a remote member's SSRC was admitted")
            return
        }
        #expect(code == .ssrcInUse && message.contains("another relay"))
    }

    @Test func anSSRCClashKeepsTheMemberOfTheRelayWhoseKeySortsFirstOnBothRelays() {
        // Here has the lower key: ada keeps 7, and the peer's member with 7 is not admitted.
        var here = roomWithAda(trunk: highKey)
        let kept = here.setRemoteMembers([remote("bob", ssrc: 7), remote("cy", ssrc: 9)], trunkID: 100, localKey: lowKey)
        #expect(kept.refused == [7] && kept.evicted.isEmpty)
        #expect(here.roster.map(\.identity) == ["ada", "cy"])
        // The peer sees the same clash from the other side: it has the higher key, so its own
        // member (ada on that relay) gives way and must join again.
        var there = roomWithAda(trunk: lowKey)
        let gaveWay = there.setRemoteMembers([remote("bob", ssrc: 7)], trunkID: 100, localKey: highKey)
        #expect(gaveWay.refused.isEmpty && gaveWay.evicted.map(\.identity) == ["ada"])
        #expect(there.roster.map(\.identity) == ["bob"])
    }

    @Test func anSSRCClashBetweenTwoTrunksKeepsTheLowerKeysMember() {
        var room = Room(name: "r")
        room.attachTrunk(id: 100, peerKey: highKey)
        room.attachTrunk(id: 200, peerKey: lowKey)
        _ = room.setRemoteMembers([remote("bob", ssrc: 5)], trunkID: 100, localKey: [5])
        let outcome = room.setRemoteMembers([remote("cy", ssrc: 5)], trunkID: 200, localKey: [5])
        #expect(outcome.refused.isEmpty)
        #expect(room.roster.map(\.identity) == ["cy"], "the member behind the lower key keeps the SSRC")
        let again = room.setRemoteMembers([remote("bob", ssrc: 5)], trunkID: 100, localKey: [5])
        #expect(again.refused == [5])
    }

    @Test func aRoomWithOnlyATrunkStaysOpenUntilTheTrunkGoes() {
        var directory = RoomDirectory(limits: RelayLimits())
        #expect(directory.attachTrunk(id: 100, peerKey: highKey, to: "r") == .admitted(replaced: nil))
        #expect(directory["r"] != nil)
        directory.detachTrunk(id: 100, from: "r")
        #expect(directory["r"] == nil)
    }

    @Test func aTrunksReportCountsOnceForEveryListenerBehindIt() {
        let board = ListenerLossBoard()
        let second: UInt64 = 1_000_000_000
        // Two listeners here lose nothing; a trunk with five members behind it reports 30/256.
        board.record(listener: 1, fractionLost: 0, now: second)
        board.record(listener: 2, fractionLost: 0, now: second)
        board.record(listener: 100, fractionLost: 30, now: second, weight: 5)
        #expect(board.medianLoss(listeners: 7, now: second) == 30, "five of seven listeners lose 30/256")
        board.record(listener: 100, fractionLost: 30, now: second, weight: 1)
        #expect(board.medianLoss(listeners: 7, now: second) == 0, "one listener behind the trunk is not the room")
    }
}
