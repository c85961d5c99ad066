import Testing
@testable import ParleyE2EE
@testable import ParleyWire

@Suite("Media keys: ratchets, epochs, keyrings")
struct MediaKeyTests {
    @Test func keyIDsNameEpochAndGeneration() {
        let id = MediaKeyID(epoch: 5, generation: 3)
        #expect(id.keyID == 0x53)
        #expect(MediaKeyID(keyID: 0x53) == id)
        #expect(MediaKeyID(epoch: 0, generation: 7).keyID == 7, "the first epoch's first generations need no header byte")
    }

    @Test func aRatchetGoesForwardOnlyAndEndsWithTheEpoch() throws {
        var key = MediaKey.fresh(epoch: 1)
        var seen: Set<[UInt8]> = [key.baseKey]
        for generation in 1..<MediaKeyID.generationsPerEpoch {
            key = try #require(key.ratcheted())
            #expect(key.id == MediaKeyID(epoch: 1, generation: generation))
            #expect(seen.insert(key.baseKey).inserted)
        }
        #expect(key.ratcheted() == nil)
    }

    @Test func aKeyringDerivesLaterGenerationsButNeverEarlierOnes() throws {
        let base = MediaKey.fresh(epoch: 2)
        let third = try #require(base.ratcheted()?.ratcheted())
        var ring = SenderKeyring()
        ring.install(third, now: 0)
        #expect(ring.key(for: base.id.keyID, now: 0) == nil, "a newcomer given generation 2 cannot open generation 0")
        let second = try #require(base.ratcheted())
        #expect(ring.key(for: second.id.keyID, now: 0) == nil)
        #expect(ring.key(for: third.id.keyID, now: 0)?.keyID == third.id.keyID)
        let fifth = try #require(third.ratcheted()?.ratcheted())
        let found = ring.key(for: fifth.id.keyID, now: 0)
        let derived = try #require(found)
        // The derived key opens what the sender sealed with its own copy.
        let metadata: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
        let frame = try #require(seal(fifth.frameKey(), [9, 9, 9], counter: 4, metadata: metadata))
        #expect(open(derived, frame, metadata: metadata) == [9, 9, 9])
        #expect(ring.key(for: MediaKeyID(epoch: 9, generation: 0).keyID, now: 0) == nil, "an epoch never given")
    }

    @Test func anOldEpochOpensForTenSecondsAfterTheNewOneIsUsedThenNever() {
        var ring = SenderKeyring()
        let old = MediaKey.fresh(epoch: 0)
        let new = MediaKey.fresh(epoch: 1)
        ring.install(old, now: 0)
        ring.install(new, now: 1_000_000_000)
        #expect(ring.key(for: old.id.keyID, now: 2_000_000_000) != nil, "until the new epoch is used, the old one stays")
        #expect(ring.key(for: new.id.keyID, now: 3_000_000_000) != nil)
        #expect(ring.key(for: old.id.keyID, now: 12_999_999_999) != nil)
        #expect(ring.key(for: old.id.keyID, now: 13_000_000_000) == nil)
        ring.expire(now: 13_000_000_000)
        #expect(ring.newestKeyID == new.id)
    }

    @Test func aSenderThatStartedAfreshReplacesItsEpoch() throws {
        var ring = SenderKeyring()
        let before = MediaKey.fresh(epoch: 0)
        ring.install(before, now: 0)
        let beforeNext = try #require(before.ratcheted())
        _ = ring.key(for: beforeNext.id.keyID, now: 0)
        let after = MediaKey.fresh(epoch: 0)  // the same ID, a new random key: a restarted client
        ring.install(after, now: 1)
        let metadata: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0]
        let next = try #require(after.ratcheted())
        let frame = try #require(seal(next.frameKey(), [1], counter: 0, metadata: metadata))
        let found = ring.key(for: next.id.keyID, now: 1)
        let key = try #require(found)
        #expect(open(key, frame, metadata: metadata) == [1], "the derived generation follows the new base, not the cached old one")
    }

    @Test func aKeyringKeepsAtMostFourEpochs() {
        var ring = SenderKeyring()
        let keys = (0..<6).map { MediaKey.fresh(epoch: UInt64($0)) }
        for key in keys { ring.install(key, now: 0) }
        #expect(ring.key(for: keys[0].id.keyID, now: 0) == nil)
        #expect(ring.key(for: keys[1].id.keyID, now: 0) == nil)
        #expect(ring.key(for: keys[5].id.keyID, now: 0) != nil)
    }
}
