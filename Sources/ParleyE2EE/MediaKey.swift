import Crypto

/// Which of a sender's media keys sealed a frame: the epoch (a fresh random key, made at the
/// start and whenever a member leaves) and the generation within it (the key ratcheted
/// forward once for each member who joined since). SFrame carries it as the KID:
/// `epoch << 4 | generation`, so the first epochs take one header byte or none.
public struct MediaKeyID: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var epoch: UInt64
    public var generation: Int

    /// Ratchets one epoch allows; a join past the last starts a fresh epoch instead.
    public static let generationsPerEpoch = 16

    public init(epoch: UInt64, generation: Int) {
        precondition((0..<Self.generationsPerEpoch).contains(generation) && epoch < 1 << 60)
        self.epoch = epoch
        self.generation = generation
    }

    /// Any 64-bit KID names some key (a hostile one names a key nobody holds).
    public init(keyID: UInt64) {
        epoch = keyID >> 4
        generation = Int(keyID & 0xF)
    }

    public var keyID: UInt64 { epoch << 4 | UInt64(generation) }

    public static func < (lhs: Self, rhs: Self) -> Bool { (lhs.epoch, lhs.generation) < (rhs.epoch, rhs.generation) }

    public var description: String { "\(epoch).\(generation)" }
}

/// A sender's media key: the base key SFrame derives from (16 random bytes, or a ratchet of
/// them) and its ID. Only members ever hold one: it travels sealed to each member's identity
/// key (``MediaKeyPackage``), never readable by the relay.
public struct MediaKey: Sendable, Hashable {
    public let id: MediaKeyID
    public let baseKey: [UInt8]

    public static let baseKeySize = 16

    public init(id: MediaKeyID, baseKey: [UInt8]) {
        self.id = id
        self.baseKey = baseKey
    }

    /// A fresh epoch's key, from the system's random generator.
    public static func fresh(epoch: UInt64) -> MediaKey {
        var generator = SystemRandomNumberGenerator()
        return MediaKey(id: MediaKeyID(epoch: epoch, generation: 0), baseKey: (0..<baseKeySize).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// The next generation: HKDF of this one, so whoever holds a generation can derive every
    /// later one of the epoch, and nobody can go back. A member who joins is given the next
    /// generation, so it cannot open what was said before it came.
    public func ratcheted() -> MediaKey? {
        guard id.generation + 1 < MediaKeyID.generationsPerEpoch else { return nil }
        let next = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: baseKey), info: Array("parley e2ee v1 ratchet".utf8), outputByteCount: Self.baseKeySize)
        return MediaKey(id: MediaKeyID(epoch: id.epoch, generation: id.generation + 1), baseKey: next.withUnsafeBytes { Array($0) })
    }

    /// The SFrame key that seals and opens frames under this media key.
    public func frameKey() -> SFrameKey { SFrameKey(baseKey: baseKey, keyID: id.keyID) }
}
