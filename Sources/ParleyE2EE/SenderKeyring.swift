/// The media keys one other member gave us, and the SFrame keys derived from them: what
/// opens that member's frames.
///
/// Keys arrive as packages (an epoch's key at some generation); later generations of the
/// epoch are derived on demand, earlier ones never (they are what a newcomer must not open).
/// An epoch stays until ``retentionNanoseconds`` after a frame of a newer epoch first opened,
/// so frames still in flight when the sender rotated still play; at most ``maximumEpochs``
/// are kept. Plain state with time passed in, owned by the network loop.
public struct SenderKeyring {
    private struct Epoch {
        /// The earliest generation we were given.
        var base: MediaKey
        /// SFrame keys by generation, derived when first needed.
        var derived: [SFrameKey?] = Array(repeating: nil, count: MediaKeyID.generationsPerEpoch)
        /// Set once a newer epoch opened a frame: when this one is dropped.
        var retiresAt: UInt64?
    }

    private var epochs: [UInt64: Epoch] = [:]
    /// The newest epoch that opened a frame.
    private var newestOpened: UInt64?

    /// How long an epoch outlives the first frame of a newer one: frames in flight (a jitter
    /// buffer's worth, a retransmitted RED copy) still open, and a member who left cannot.
    public static let retentionNanoseconds: UInt64 = 10_000_000_000
    public static let maximumEpochs = 4

    public init() {}

    public var isEmpty: Bool { epochs.isEmpty }

    /// The keys we were given, the earliest generation of each epoch held.
    public var heldKeys: [MediaKey] { epochs.values.map(\.base).sorted { $0.id < $1.id } }

    /// The newest key we hold, for the status (nil before the first package).
    public var newestKeyID: MediaKeyID? {
        epochs.values.map(\.base.id).max()
    }

    /// Takes a key from a package. A later generation of an epoch we hold adds nothing when
    /// it is the ratchet of what we hold; anything else (an earlier generation, or an epoch
    /// the sender started afresh after a restart) replaces the epoch.
    public mutating func install(_ key: MediaKey, now: UInt64) {
        let epoch = key.id.epoch
        if let held = epochs[epoch] {
            if held.base == key { return }
            if key.id.generation > held.base.id.generation, Self.ratchet(held.base, to: key.id.generation) == key { return }
        }
        epochs[epoch] = Epoch(base: key)
        while epochs.count > Self.maximumEpochs, let oldest = epochs.keys.min() {
            epochs.removeValue(forKey: oldest)
        }
    }

    /// The key named by `keyID`, or nil when we hold no key that reaches it.
    public mutating func key(for keyID: UInt64, now: UInt64) -> SFrameKey? {
        let id = MediaKeyID(keyID: keyID)
        guard var epoch = epochs[id.epoch], id.generation >= epoch.base.id.generation else { return nil }
        if epoch.retiresAt.map({ now >= $0 }) == true { return nil }
        let key: SFrameKey
        if let cached = epoch.derived[id.generation] {
            key = cached
        } else {
            guard let media = Self.ratchet(epoch.base, to: id.generation) else { return nil }
            key = media.frameKey()
            epoch.derived[id.generation] = key
            epochs[id.epoch] = epoch
        }
        if newestOpened.map({ id.epoch > $0 }) ?? true {
            newestOpened = id.epoch
            for other in epochs.keys where other < id.epoch && epochs[other]?.retiresAt == nil {
                epochs[other]?.retiresAt = now &+ Self.retentionNanoseconds
            }
        }
        return key
    }

    /// Drops the epochs whose time is up.
    public mutating func expire(now: UInt64) {
        for (epoch, held) in epochs where held.retiresAt.map({ now >= $0 }) == true {
            epochs.removeValue(forKey: epoch)
        }
    }

    private static func ratchet(_ key: MediaKey, to generation: Int) -> MediaKey? {
        var key = key
        while key.id.generation < generation {
            guard let next = key.ratcheted() else { return nil }
            key = next
        }
        return key
    }
}
