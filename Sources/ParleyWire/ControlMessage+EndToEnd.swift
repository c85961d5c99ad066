/// What end-to-end encryption adds to the control messages. The relay carries it without
/// being able to read the part that matters: it never holds a media key.
///
/// ```
/// join, after the capabilities:        key length (1) | identity key (32)
/// joined, permissions bit 1:           the room is end-to-end encrypted
/// roster, after the state block:       for each member: key length (1) | identity key (32)
/// media keys (reliable):               sender ssrc (4) | count (1) | count × (ssrc (4) | length (2) | sealed package)
///     member → relay:  sender 0, each entry's SSRC its recipient
///     relay → relay:   over a trunk, the sender's SSRC, each entry's its recipient
///     relay → member:  sender 0, each entry's SSRC its sender (the recipient is the member)
/// ```
///
/// A member's identity key is its long-term X25519 public key: the relay repeats it in the
/// roster so that every member can seal its media key to every other. A sealed package is
/// opaque here (HPKE, `MediaKeyPackage` inside); the relay routes each entry to the member
/// whose SSRC it names, on this relay or over a trunk, and tells the recipient whose it is
/// (a client's own word for that is never taken). To a member it gathers the keys of several
/// senders into one message, so a rotation of a large room costs each member a few
/// messages and acknowledgements, not one per sender. Older relays and clients read neither the key fields (they sit where
/// they stopped reading) nor the new message, and an end-to-end encrypted room refuses them.
extension ControlMessage {
    /// Sealed media keys, one entry per recipient.
    public struct MediaKeys: Sendable, Hashable {
        public struct Entry: Sendable, Hashable {
            /// Toward the relay and over a trunk: the member it is sealed for. From the relay
            /// to a member: the member who sealed it.
            public var ssrc: UInt32
            public var package: [UInt8]

            public init(ssrc: UInt32, package: [UInt8]) {
                self.ssrc = ssrc
                self.package = package
            }
        }

        /// Over a trunk, the member who sealed them; 0 otherwise (a member's own word for it
        /// is never taken, and to a member each entry names its sender).
        public var sender: UInt32
        public var entries: [Entry]

        /// Entries in one message: a room's rotation goes out in several, each well under a
        /// datagram (``maximumPackageSize`` each).
        public static let maximumEntries = 8
        /// The largest sealed package: an HPKE encapsulation, a package and a tag, with room
        /// to grow.
        public static let maximumPackageSize = 256

        public init(sender: UInt32 = 0, entries: [Entry]) {
            self.sender = sender
            self.entries = entries
        }

        var serializedSize: Int { 4 + 1 + entries.reduce(0) { $0 + 4 + 2 + $1.package.count } }

        init(reading reader: inout ByteReader) throws(WireError) {
            sender = try reader.readUInt32()
            let count = Int(try reader.readUInt8())
            guard count <= Self.maximumEntries else {
                throw .malformed(.controlMessage, reason: "more media key entries than one message may carry")
            }
            var entries: [Entry] = []
            entries.reserveCapacity(count)
            for _ in 0..<count {
                let ssrc = try reader.readUInt32()
                let length = Int(try reader.readUInt16())
                guard length <= Self.maximumPackageSize else {
                    throw .malformed(.controlMessage, reason: "a sealed media key longer than 256 bytes")
                }
                entries.append(Entry(ssrc: ssrc, package: Array(try reader.readBytes(length))))
            }
            self.entries = entries
        }

        func write(to writer: inout ByteWriter) throws(WireError) {
            guard entries.count <= Self.maximumEntries else {
                throw .malformed(.controlMessage, reason: "more media key entries than one message may carry")
            }
            try writer.write(sender)
            try writer.write(UInt8(entries.count))
            for entry in entries {
                guard entry.package.count <= Self.maximumPackageSize else {
                    throw .malformed(.controlMessage, reason: "a sealed media key longer than 256 bytes")
                }
                try writer.write(entry.ssrc)
                try writer.write(UInt16(entry.package.count))
                try writer.write(contentsOf: entry.package)
            }
        }
    }

    /// The length of an identity key (X25519 public key).
    public static let identityKeySize = 32

    /// An identity key field: a length byte, 0 (none) or 32, then the key.
    static func readIdentityKey(_ reader: inout ByteReader) throws(WireError) -> [UInt8] {
        let length = Int(try reader.readUInt8())
        guard length == 0 || length == identityKeySize else {
            throw .malformed(.controlMessage, reason: "an identity key is 32 bytes")
        }
        return Array(try reader.readBytes(length))
    }

    static func writeIdentityKey(_ key: [UInt8], to writer: inout ByteWriter) throws(WireError) {
        guard key.isEmpty || key.count == identityKeySize else {
            throw .malformed(.controlMessage, reason: "an identity key is 32 bytes")
        }
        try writer.write(UInt8(key.count))
        try writer.write(contentsOf: key)
    }

    /// The roster's key block: absent from relays that predate it (every key empty).
    static func readRosterKeys(_ reader: inout ByteReader, into members: inout [Roster.Member]) throws(WireError) {
        guard !reader.isAtEnd else { return }
        for index in members.indices {
            members[index].identityKey = try readIdentityKey(&reader)
        }
    }

    static func writeRosterKeys(_ members: [Roster.Member], to writer: inout ByteWriter) throws(WireError) {
        for member in members { try writeIdentityKey(member.identityKey, to: &writer) }
    }
}
