import ParleyRelay
import ParleyWire
import Testing

@Suite("Room membership rules")
struct RoomTests {
    func member(_ id: UInt64, _ identity: String, ssrc: UInt32? = nil) -> Room.Member {
        Room.Member(sessionID: id, identity: identity, ssrc: ssrc ?? UInt32(id) * 100, canPublish: true)
    }

    @Test func joiningMembersAreNotInTheRosterUntilActive() {
        var room = Room(name: "r")
        let admission = room.admit(member(1, "ada"), maximumMembers: 5)
        #expect(admission == .admitted(replaced: nil))
        #expect(room.roster.isEmpty && room.version == 0)
        let first = room.activate(sessionID: 1), second = room.activate(sessionID: 1)
        #expect(first && !second)
        #expect(room.roster.map(\.identity) == ["ada"] && room.version == 1)
    }

    @Test func aFullRoomAndATakenSSRCAreRefused() {
        var room = Room(name: "r")
        _ = room.admit(member(1, "ada", ssrc: 7), maximumMembers: 2)
        if case let .refused(code, _) = room.admit(member(2, "bob", ssrc: 7), maximumMembers: 2) { #expect(code == .ssrcInUse) } else { Issue.record("SSRC clash admitted") }
        _ = room.admit(member(3, "cy"), maximumMembers: 2)
        if case let .refused(code, _) = room.admit(member(4, "dee"), maximumMembers: 2) { #expect(code == .roomFull) } else { Issue.record("full room admitted") }
    }

    @Test func theSameIdentityReplacesEvenInAFullRoom() {
        var room = Room(name: "r")
        _ = room.admit(member(1, "ada"), maximumMembers: 2)
        _ = room.admit(member(2, "bob"), maximumMembers: 2)
        room.activate(sessionID: 1)
        let before = room.version
        let admission = room.admit(member(3, "ada"), maximumMembers: 2)
        #expect(admission == .admitted(replaced: member(1, "ada").activated))
        #expect(room.version > before)
        #expect(room.members.map(\.sessionID) == [2, 3])
    }

    @Test func leavingChangesTheVersionOnlyForActiveMembers() {
        var room = Room(name: "r")
        _ = room.admit(member(1, "ada"), maximumMembers: 5)
        _ = room.admit(member(2, "bob"), maximumMembers: 5)
        room.activate(sessionID: 1)
        let version = room.version
        room.remove(sessionID: 2)
        #expect(room.version == version)
        room.remove(sessionID: 1)
        #expect(room.version == version + 1 && room.isEmpty)
    }

    @Test func theDirectoryLimitsRoomsAndClosesEmptyOnes() {
        var limits = RelayLimits()
        limits.maximumRooms = 2
        var directory = RoomDirectory(limits: limits)
        _ = directory.admit(member(1, "a"), to: "one")
        _ = directory.admit(member(2, "b"), to: "two")
        if case let .refused(code, _) = directory.admit(member(3, "c"), to: "three") { #expect(code == .tooManyRooms) } else { Issue.record("third room opened") }
        directory.remove(sessionID: 1, from: "one")
        #expect(directory["one"] == nil)
        let admission = directory.admit(member(3, "c"), to: "three")
        #expect(admission == .admitted(replaced: nil))
        directory.activate(sessionID: 3, in: "three")
        #expect(directory.memberCount.active == 1 && directory.memberCount.joining == 1)
    }
}

extension Room.Member {
    var activated: Room.Member { var copy = self; copy.isActive = true; return copy }
}
