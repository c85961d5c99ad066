import Synchronization

/// The ephemeral keys of handshakes the relay accepted in the last two cookie epochs.
///
/// A handshake init is accepted once: its ephemeral key is unique per handshake, so a
/// second init with the same key is a replay. Entries older than two epochs can go,
/// because their cookies no longer verify. Two generations of sets, rotated each epoch,
/// keep that bounded without timers. When a generation is full the cache refuses new
/// handshakes rather than forget old ones: failing closed keeps replays out.
public final class HandshakeReplayCache: Sendable {
    public let capacityPerEpoch: Int

    private struct Generations {
        var epoch: UInt64 = 0
        var current: Set<[UInt8]> = []
        var previous: Set<[UInt8]> = []
    }

    private let state = Mutex(Generations())

    public init(capacityPerEpoch: Int = 100_000) {
        self.capacityPerEpoch = capacityPerEpoch
    }

    public enum Outcome: Sendable, Hashable {
        case accepted
        case replayed
        case full
    }

    /// Records `ephemeralKey` for the epoch of `unixSeconds` unless it is already known.
    public func insert(_ ephemeralKey: [UInt8], unixSeconds: UInt64) -> Outcome {
        let epoch = AddressCookieMinter.epoch(unixSeconds: unixSeconds)
        return state.withLock { generations in
            if epoch != generations.epoch {
                generations.previous = epoch == generations.epoch + 1 ? generations.current : []
                generations.current = []
                generations.epoch = epoch
            }
            if generations.current.contains(ephemeralKey) || generations.previous.contains(ephemeralKey) {
                return .replayed
            }
            guard generations.current.count < capacityPerEpoch else { return .full }
            generations.current.insert(ephemeralKey)
            return .accepted
        }
    }

    public var count: Int { state.withLock { $0.current.count + $0.previous.count } }
}
