import Synchronization

/// The ephemeral keys of handshakes the relay admitted in the last two cookie epochs.
///
/// A handshake init is accepted once: its ephemeral key is unique per handshake, so a
/// second init with the same key is a replay. Entries older than two epochs can go,
/// because their cookies no longer verify. Two generations of sets, rotated each epoch,
/// keep that bounded without timers.
///
/// Only a join whose token verified is recorded, so a stranger cannot fill the cache, and
/// each source (an IPv4 address, an IPv6 /64) may record at most ``capacityPerSource`` in
/// two generations: more than one host's join budget lets through on one event loop (10 a
/// second), so a busy NAT is never refused, while a host spread over many loops, or a
/// relay whose budgets were raised, still cannot take the cache for itself. If verified joins from many sources fill a
/// generation all the same, the cache starts a new one early: it forgets the oldest
/// handshakes (which could then be replayed from their own address until their cookies
/// expire, at worst replacing that member's session) rather than refuse anyone's join.
public final class HandshakeReplayCache: Sendable {
    public let capacityPerEpoch: Int
    public let capacityPerSource: Int

    private struct Generation {
        var keys: Set<[UInt8]> = []
        var perSource: [[UInt8]: Int] = [:]
    }

    private struct Generations {
        var epoch: UInt64 = 0
        var current = Generation()
        var previous = Generation()

        mutating func rotate() {
            previous = current
            current = Generation()
        }
    }

    private let state = Mutex(Generations())

    public init(capacityPerEpoch: Int = 100_000, capacityPerSource: Int = 2_048) {
        precondition(capacityPerEpoch > 0 && capacityPerSource > 0, "a replay cache needs room")
        self.capacityPerEpoch = capacityPerEpoch
        self.capacityPerSource = capacityPerSource
    }

    public enum Outcome: Sendable, Hashable {
        case accepted
        /// Seen before: a replay, or a retransmission of an init already admitted.
        case replayed
        /// The source has admitted ``capacityPerSource`` handshakes in the last two epochs.
        case sourceOverQuota
    }

    /// Whether `ephemeralKey` was recorded in this epoch or the one before (a cheap look, before
    /// the token is checked).
    public func contains(_ ephemeralKey: [UInt8], unixSeconds: UInt64) -> Bool {
        let epoch = AddressCookieMinter.epoch(unixSeconds: unixSeconds)
        return state.withLock { generations in
            advance(&generations, to: epoch)
            return generations.current.keys.contains(ephemeralKey) || generations.previous.keys.contains(ephemeralKey)
        }
    }

    /// Records the handshake of an admitted join from `source` unless it is already known.
    public func insert(_ ephemeralKey: [UInt8], source: [UInt8], unixSeconds: UInt64) -> Outcome {
        let epoch = AddressCookieMinter.epoch(unixSeconds: unixSeconds)
        return state.withLock { generations in
            advance(&generations, to: epoch)
            if generations.current.keys.contains(ephemeralKey) || generations.previous.keys.contains(ephemeralKey) {
                return .replayed
            }
            let fromSource = generations.current.perSource[source, default: 0] + generations.previous.perSource[source, default: 0]
            guard fromSource < capacityPerSource else { return .sourceOverQuota }
            if generations.current.keys.count >= capacityPerEpoch { generations.rotate() }
            generations.current.keys.insert(ephemeralKey)
            generations.current.perSource[source, default: 0] += 1
            return .accepted
        }
    }

    private func advance(_ generations: inout Generations, to epoch: UInt64) {
        guard epoch != generations.epoch else { return }
        if epoch == generations.epoch &+ 1 {
            generations.rotate()
        } else {
            generations = Generations()
        }
        generations.epoch = epoch
    }

    public var count: Int { state.withLock { $0.current.keys.count + $0.previous.keys.count } }
}
