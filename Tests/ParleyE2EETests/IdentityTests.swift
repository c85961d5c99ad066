import Crypto
import ParleyBasics
import Testing
@testable import ParleyE2EE
@testable import ParleyWire

#if canImport(Glibc)
import Glibc
#endif

@Suite("Identities, sealed media keys, safety numbers, pins")
struct IdentityTests {
    let alice = IdentityKey()
    let bob = IdentityKey()
    let view = RoomView(room: "team", members: []).digest

    func package(_ key: MediaKey) -> MediaKeyPackage {
        MediaKeyPackage(keyID: key.id.keyID, baseKey: key.baseKey, memberCount: 2, roomViewDigest: view)
    }

    @Test func aSealedMediaKeyOpensOnlyForItsRecipientFromItsSenderInItsRoom() throws {
        let key = MediaKey.fresh(epoch: 4)
        let sealed = try SealedMediaKey.seal(package(key), to: bob.publicKeyBytes, recipient: "bob", from: alice, senderName: "alice", room: "team")
        #expect(sealed.count == 32 + package(key).serializedSize + 16)
        let opened = try SealedMediaKey.open(sealed, by: bob, recipientName: "bob", from: alice.publicKeyBytes, senderName: "alice", room: "team")
        #expect(opened == package(key))
        let mallory = IdentityKey()
        #expect(throws: SealedMediaKey.Failure.doesNotOpen) {
            try SealedMediaKey.open(sealed, by: mallory, recipientName: "bob", from: alice.publicKeyBytes, senderName: "alice", room: "team")
        }
        #expect(throws: SealedMediaKey.Failure.doesNotOpen, "a relay presenting it as someone else's") {
            try SealedMediaKey.open(sealed, by: bob, recipientName: "bob", from: mallory.publicKeyBytes, senderName: "alice", room: "team")
        }
        #expect(throws: SealedMediaKey.Failure.doesNotOpen, "under another name") {
            try SealedMediaKey.open(sealed, by: bob, recipientName: "bob", from: alice.publicKeyBytes, senderName: "carol", room: "team")
        }
        #expect(throws: SealedMediaKey.Failure.doesNotOpen, "in another room") {
            try SealedMediaKey.open(sealed, by: bob, recipientName: "bob", from: alice.publicKeyBytes, senderName: "alice", room: "other")
        }
        for index in sealed.indices {
            var tampered = sealed
            tampered[index] ^= 0x80
            #expect(throws: SealedMediaKey.Failure.self) {
                try SealedMediaKey.open(tampered, by: bob, recipientName: "bob", from: alice.publicKeyBytes, senderName: "alice", room: "team")
            }
        }
    }

    @Test func theSafetyNumberIsTheSameOnBothSidesAndChangesWithEitherKey() {
        let number = Fingerprint.safetyNumber(alice.publicKeyBytes, bob.publicKeyBytes)
        #expect(number == Fingerprint.safetyNumber(bob.publicKeyBytes, alice.publicKeyBytes))
        #expect(number.split(separator: " ").count == 6)
        #expect(number.allSatisfy { $0.isNumber || $0 == " " } && number.count == 35)
        #expect(number != Fingerprint.safetyNumber(alice.publicKeyBytes, IdentityKey().publicKeyBytes))
        #expect(Fingerprint.of(alice.publicKeyBytes).count == 9)
        #expect(Fingerprint.of(alice.publicKeyBytes) != Fingerprint.of(bob.publicKeyBytes))
    }

    @Test func aRoomViewDependsOnWhoIsInItNotOnTheOrderTheyCame() {
        let a = RoomView.Member(identity: "alice", identityKey: alice.publicKeyBytes)
        let b = RoomView.Member(identity: "bob", identityKey: bob.publicKeyBytes)
        #expect(RoomView(room: "team", members: [a, b]).digest == RoomView(room: "team", members: [b, a]).digest)
        #expect(RoomView(room: "team", members: [a, b]).digest != RoomView(room: "team", members: [a]).digest)
        #expect(RoomView(room: "team", members: [a, b]).digest != RoomView(room: "other", members: [a, b]).digest)
        let swapped = RoomView.Member(identity: "bob", identityKey: IdentityKey().publicKeyBytes)
        #expect(RoomView(room: "team", members: [a, b]).digest != RoomView(room: "team", members: [a, swapped]).digest)
    }

    @Test func pinsAcceptTheFirstKeyRecogniseItAndRefuseAnother() {
        var pins = IdentityPins()
        #expect(pins.check(room: "team", identity: "bob", key: bob.publicKeyBytes, now: 100) == .firstSeen)
        #expect(pins.check(room: "team", identity: "bob", key: bob.publicKeyBytes, now: 200) == .known(since: 100))
        let other = IdentityKey().publicKeyBytes
        #expect(pins.check(room: "team", identity: "bob", key: other, now: 300) == .changed(pinned: bob.publicKeyBytes))
        #expect(pins.check(room: "other", identity: "bob", key: other, now: 300) == .firstSeen, "pinned per room")
        pins.accept(room: "team", identity: "bob", key: other, now: 400)
        #expect(pins.check(room: "team", identity: "bob", key: other, now: 500) == .known(since: 400))
        #expect(pins.check(room: "team", identity: "bo\nb", key: other, now: 500) == .unpinnable)
        let reread = IdentityPins(parsing: pins.text + "garbage line\n")
        var copy = reread
        #expect(copy.check(room: "team", identity: "bob", key: other, now: 600) == .known(since: 400))
        #expect(reread.text.contains("garbage line"), "a line that does not read is kept, not lost")
    }

    @Test func anIdentityIsMadeOnceWithMode0600AndReadBack() throws {
        let folder = "/tmp/parley-identity-\(UInt64.random(in: 0...UInt64.max))"
        defer { _ = system("rm -rf \(folder)") }
        let path = folder + "/nested/identity"
        let (made, created) = try IdentityKey.loadOrCreate(at: path)
        #expect(created)
        var info = stat()
        #expect(stat(path, &info) == 0 && info.st_mode & 0o777 == 0o600)
        #expect(stat(folder + "/nested", &info) == 0 && info.st_mode & 0o777 == 0o700)
        let (again, createdAgain) = try IdentityKey.loadOrCreate(at: path)
        #expect(!createdAgain && again.publicKeyBytes == made.publicKeyBytes)
        chmod(path, 0o644)
        #expect(throws: TextFile.Failure.self) { try IdentityKey.loadOrCreate(at: path) }
        chmod(path, 0o600)
        try TextFile.writePrivately("parley identity v1\nnot-a-key\n", to: path, replacing: true, exists: "")
        #expect(throws: TextFile.Failure.self) { try IdentityKey.loadOrCreate(at: path) }
    }

    @Test func packageParserSurvivesAnyBytes() throws {
        var random = SplitMix64(seed: 0xE2EE)
        let valid = try package(MediaKey.fresh(epoch: 1)).serialized()
        for _ in 0..<5_000 {
            var bytes = valid
            if Bool.random(using: &random) { bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &random))) }
            for _ in 0..<Int.random(in: 0...3, using: &random) where !bytes.isEmpty {
                bytes[Int.random(in: 0..<bytes.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
            }
            bytes.withUnsafeBytes { raw in
                if let parsed = try? MediaKeyPackage(parsing: raw) { #expect((try? parsed.serialized()) != nil) }
            }
        }
    }
}
