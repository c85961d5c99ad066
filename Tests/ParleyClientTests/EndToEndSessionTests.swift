import ParleyE2EE
import ParleyWire
import Testing
@testable import ParleyClient

/// The call's end-to-end encryption as plain state: members join and leave through rosters,
/// sealed keys go from one session to the others as the relay would carry them, and every
/// frame one seals is tried with the keys the others hold.
@Suite("End-to-end sessions: keys follow the room")
struct EndToEndSessionTests {
    final class Person {
        let name: String
        let ssrc: UInt32
        let key: IdentityKey
        let session: EndToEndSession
        var sealer: FrameSealer
        init(_ name: String, ssrc: UInt32, key: IdentityKey = IdentityKey()) {
            self.name = name
            self.ssrc = ssrc
            self.key = key
            let sending = SendingKey(.withheld)
            session = EndToEndSession(identity: key, room: "team", pins: IdentityPins(), pinsPath: nil, sendingKey: sending)
            sealer = FrameSealer(source: sending)
            session.joined(identity: name, ssrc: ssrc)
        }

        var entry: ControlMessage.Roster.Member {
            ControlMessage.Roster.Member(ssrc: ssrc, identity: name, canPublish: true, capabilities: .supported, identityKey: key.publicKeyBytes)
        }

        func seal(_ timestamp: UInt32) -> [UInt8]? {
            var output = [UInt8](repeating: 0, count: 200)
            let frame: [UInt8] = Array(repeating: UInt8(truncatingIfNeeded: timestamp), count: 40)
            let outcome = frame.withUnsafeBytes { plain in
                output.withUnsafeMutableBytes { sealer.seal(plain, metadata: FrameMetadata(ssrc: ssrc, timestamp: timestamp), into: $0) }
            }
            guard case let .sealed(count) = outcome else { return nil }
            return Array(output.prefix(count))
        }
    }

    /// The relay's part: each message's entries go to the members they name, each then naming its sender.
    static func deliver(_ messages: [ControlMessage.MediaKeys], from sender: Person, to people: [Person], now: UInt64) {
        for message in messages {
            for entry in message.entries {
                people.first { $0.ssrc == entry.ssrc }?.session.received(
                    ControlMessage.MediaKeys(entries: [.init(ssrc: sender.ssrc, package: entry.package)]), now: now)
            }
        }
    }

    /// Everyone in `present` gets the roster of `present`; their packages are delivered.
    static func roster(_ present: [Person], now: UInt64) {
        let entries = present.map(\.entry)
        var outgoing: [(Person, [ControlMessage.MediaKeys])] = []
        for person in present { outgoing.append((person, person.session.rosterChanged(entries, now: now, wallSeconds: 0))) }
        for (sender, messages) in outgoing { deliver(messages, from: sender, to: present, now: now) }
    }

    static func opens(_ frame: [UInt8], from sender: Person, at listener: Person, timestamp: UInt32, now: UInt64) -> Bool {
        guard let keys = listener.session.keys(forStream: sender.ssrc) else { return false }
        let decryptor = StreamDecryptor(keys: keys, ssrc: sender.ssrc)
        return frame.withUnsafeBytes { raw in
            if case .opened = decryptor.open(raw, timestamp: timestamp, now: now) { return true }
            return false
        }
    }

    @Test func everyoneOpensEveryoneAsTheyJoinOneByOne() throws {
        let ada = Person("ada", ssrc: 1)
        let bob = Person("bob", ssrc: 2)
        let cy = Person("cy", ssrc: 3)
        Self.roster([ada], now: 0)
        Self.roster([ada, bob], now: 1_000_000_000)
        Self.roster([ada, bob, cy], now: 2_000_000_000)
        for person in [ada, bob, cy] { person.session.tick(now: 3_000_000_000) }
        for sender in [ada, bob, cy] {
            let frame = try #require(sender.seal(960))
            for listener in [ada, bob, cy] where listener !== sender {
                #expect(Self.opens(frame, from: sender, at: listener, timestamp: 960, now: 3_000_000_000), "\(listener.name) cannot open \(sender.name)")
            }
        }
    }

    /// The relay paces rosters: a newcomer's keys can reach the others before the roster that
    /// names it. They wait for it.
    @Test func keysThatOvertakeTheRosterNamingTheirSenderAreKeptForIt() throws {
        let ada = Person("ada", ssrc: 1)
        let bob = Person("bob", ssrc: 2)
        Self.roster([ada], now: 0)
        let bobsKeys = bob.session.rosterChanged([ada.entry, bob.entry], now: 1, wallSeconds: 0)
        Self.deliver(bobsKeys, from: bob, to: [ada], now: 2)  // before ada's roster shows bob
        let adasKeys = ada.session.rosterChanged([ada.entry, bob.entry], now: 3, wallSeconds: 0)
        Self.deliver(adasKeys, from: ada, to: [bob], now: 4)
        let frame = try #require(bob.seal(0))
        #expect(Self.opens(frame, from: bob, at: ada, timestamp: 0, now: 5))
    }

    /// A client that restarts is the same person in a new session (a new SSRC) holding no
    /// key: it is given the keys in use, and nobody else's key changes.
    @Test func someoneWhoComesBackInANewSessionIsGivenTheKeysAgain() throws {
        let ada = Person("ada", ssrc: 1)
        let bob = Person("bob", ssrc: 2)
        Self.roster([ada, bob], now: 0)
        let restarted = Person("bob", ssrc: 7, key: bob.key)
        let adasKeys = ada.session.rosterChanged([ada.entry, restarted.entry], now: 1, wallSeconds: 0)
        #expect(adasKeys.flatMap(\.entries).map(\.ssrc) == [7], "to the new session only")
        Self.deliver(adasKeys, from: ada, to: [restarted], now: 2)
        _ = restarted.session.rosterChanged([ada.entry, restarted.entry], now: 2, wallSeconds: 0)
        let frame = try #require(ada.seal(0))
        #expect(Self.opens(frame, from: ada, at: restarted, timestamp: 0, now: 3))
    }

    @Test func aLeaverIsShutOutOnceTheFreshKeyTakesOverAndTheOthersFollowIt() throws {
        let ada = Person("ada", ssrc: 1)
        let bob = Person("bob", ssrc: 2)
        let cy = Person("cy", ssrc: 3)
        Self.roster([ada, bob, cy], now: 0)
        let before = try #require(ada.seal(0))
        #expect(Self.opens(before, from: ada, at: bob, timestamp: 0, now: 0))
        Self.roster([ada, cy], now: 1_000_000_000)
        ada.session.tick(now: 1_000_000_000 + MediaKeySchedule.switchDelayNanoseconds)
        let after = try #require(ada.seal(960))
        #expect(!Self.opens(after, from: ada, at: bob, timestamp: 960, now: 2_000_000_000), "bob left and still opens ada")
        #expect(Self.opens(after, from: ada, at: cy, timestamp: 960, now: 2_000_000_000))
    }

    @Test func aSenderWhoseViewOfTheRoomIsNotOursRaisesTheAlarmAfterTheGrace() {
        let ada = Person("ada", ssrc: 1)
        let bob = Person("bob", ssrc: 2)
        let ghost = Person("ghost", ssrc: 9)
        Self.roster([ada], now: 0)
        _ = ada.session.rosterChanged([ada.entry, bob.entry], now: 1, wallSeconds: 0)
        // The relay shows bob a room with a ghost in it; ada is never shown the ghost.
        let messages = bob.session.rosterChanged([ada.entry, bob.entry, ghost.entry], now: 1, wallSeconds: 0)
        Self.deliver(messages, from: bob, to: [ada], now: 2)
        ada.session.tick(now: 1_000_000_000)
        #expect(ada.session.takeNotices().isEmpty, "within the grace a roster may still be on its way")
        ada.session.tick(now: 4_000_000_000)
        #expect(ada.session.takeNotices() == [.viewDiffers(identity: "bob", theirCount: 3, ourCount: 2)])
        #expect(ada.session.status().members.first { $0.identity == "bob" }?.seesAnotherRoom != nil)
    }
}
