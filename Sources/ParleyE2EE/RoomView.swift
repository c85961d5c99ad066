import Crypto

/// The room as one member sees it: every member's name and identity key, as its roster says.
/// Each media key package carries the sender's view (its digest and size); a member whose own
/// view does not come to match a sender's soon learns that the relay shows the two of them
/// different rooms, which is how a member hidden from some of the room shows up.
public struct RoomView: Sendable, Hashable {
    public struct Member: Sendable, Hashable, Comparable {
        public var identity: String
        public var identityKey: [UInt8]

        public init(identity: String, identityKey: [UInt8]) {
            self.identity = identity
            self.identityKey = identityKey
        }

        /// By the name's UTF-8 bytes, then the key's: an order any implementation (a browser's
        /// too) computes the same way, unlike Unicode collation.
        public static func < (lhs: Self, rhs: Self) -> Bool {
            if lhs.identity != rhs.identity { return Array(lhs.identity.utf8).lexicographicallyPrecedes(Array(rhs.identity.utf8)) }
            return lhs.identityKey.lexicographicallyPrecedes(rhs.identityKey)
        }
    }

    public let members: [Member]
    /// SHA-256 over the room's name and the members in sorted order, each field length-prefixed.
    public let digest: [UInt8]

    public init(room: String, members: some Sequence<Member>) {
        let sorted = members.sorted()
        self.members = sorted
        var hash = SHA256()
        hash.update(data: Array("parley e2ee v1 room view".utf8))
        Self.update(&hash, Array(room.utf8))
        for member in sorted {
            Self.update(&hash, Array(member.identity.utf8))
            Self.update(&hash, member.identityKey)
        }
        digest = Array(hash.finalize())
    }

    private static func update(_ hash: inout SHA256, _ field: [UInt8]) {
        let length = UInt16(clamping: field.count)
        hash.update(data: [UInt8(length >> 8), UInt8(truncatingIfNeeded: length)])
        hash.update(data: field.prefix(Int(length)))
    }
}
