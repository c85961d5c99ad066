/// The control messages of a cluster of relays: where a room lives, and which other relays a
/// member may fall back to.
///
/// A relay that does not host a room answers a join for it with ``Redirect`` instead of
/// ``Joined``, inside the handshake response: only the relay whose key the client pinned
/// can write it, so the address and key it names are as trustworthy as that relay. A
/// ``Joined`` from a cluster member lists other relays (``Joined/clusterRelays``), which the
/// client tries if this one falls silent. Relays on their own send neither.
extension ControlMessage {
    /// A relay of the cluster, as a client needs it: where to send and which key to pin.
    public struct ClusterRelay: Sendable, Hashable, CustomStringConvertible {
        /// "HOST:PORT" ("[v6]:PORT").
        public var address: String
        /// Its X25519 public key (32 bytes); empty for a relay started `--insecure`.
        public var publicKey: [UInt8]

        public static let keySize = 32
        /// At most this many travel in one message.
        public static let maximumListed = 8

        public init(address: String, publicKey: [UInt8]) {
            self.address = address
            self.publicKey = publicKey
        }

        public var description: String { address }

        var serializedSize: Int { 1 + address.utf8.count + 1 + publicKey.count }

        func write(to writer: inout ByteWriter) throws(WireError) {
            guard publicKey.isEmpty || publicKey.count == Self.keySize else {
                throw .malformed(.controlMessage, reason: "a relay key is 32 bytes")
            }
            try writer.writeString8(address, element: .controlMessage)
            try writer.write(UInt8(publicKey.count))
            try writer.write(contentsOf: publicKey)
        }

        init(reading reader: inout ByteReader) throws(WireError) {
            address = try reader.readString8()
            let count = Int(try reader.readUInt8())
            guard count == 0 || count == Self.keySize else {
                throw .malformed(.controlMessage, reason: "a relay key is 32 bytes")
            }
            publicKey = Array(try reader.readBytes(count))
        }

        static func writeList(_ relays: [ClusterRelay], to writer: inout ByteWriter) throws(WireError) {
            guard relays.count <= maximumListed else {
                throw .malformed(.controlMessage, reason: "more than \(maximumListed) relays listed")
            }
            try writer.write(UInt8(relays.count))
            for relay in relays { try relay.write(to: &writer) }
        }

        static func readList(_ reader: inout ByteReader) throws(WireError) -> [ClusterRelay] {
            let count = Int(try reader.readUInt8())
            guard count <= maximumListed else {
                throw .malformed(.controlMessage, reason: "more than \(maximumListed) relays listed")
            }
            var relays: [ClusterRelay] = []
            for _ in 0..<count { relays.append(try ClusterRelay(reading: &reader)) }
            return relays
        }

        static func listSize(_ relays: [ClusterRelay]) -> Int { 1 + relays.reduce(0) { $0 + $1.serializedSize } }
    }

    /// Relay → client, instead of ``Joined``: the room lives on `relay`; join there.
    public struct Redirect: Sendable, Hashable {
        /// The room the join asked for (a client follows only a redirect for its own room).
        public var room: String
        public var relay: ClusterRelay
        /// Other relays of the cluster, to fall back to later.
        public var others: [ClusterRelay]

        public init(room: String, relay: ClusterRelay, others: [ClusterRelay] = []) {
            self.room = room
            self.relay = relay
            self.others = others
        }
    }
}
