import ParleyBasics
import ParleyRelay
import ParleySecurity
import ParleyWire

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What the cluster keeps in etcd, and where.
///
/// ```
/// /parley/relays/<relay-id>  {"address":"198.51.100.7:7800","key":"<base64url X25519>","load":12,"region":"eu","lease":"7587…"}
///                            under the relay's own lease: gone within its TTL when the relay dies
/// /parley/rooms/<room>       {"relay":"<relay-id>"}
///                            created once (create_revision == 0) under the HOSTING relay's lease
/// /parley/present/<room>/<relay-id>  {"relay":"<relay-id>"}
///                            the relay has members of the room (it joined people there who are
///                            nearer to it than to the room's home), under that relay's lease;
///                            the relays present in a room open trunks to each other
/// ```
///
/// A relay's ID is its public address (`--public-address`): unique by construction, and the
/// same after a restart, so a restarted relay takes its own registration back.
enum ClusterKeys {
    static let prefix = "/parley/"
    static let relaysPrefix = "/parley/relays/"
    static let roomsPrefix = "/parley/rooms/"
    static let presencePrefix = "/parley/present/"
    static let canaryPrefix = "/parley/canary/"

    static func relay(_ id: String) -> String { relaysPrefix + id }
    static func room(_ name: String) -> String { roomsPrefix + name }
    /// Room names have no '/' (``ParleyNames``), so the first one after the prefix ends the room.
    static func presence(room: String, relay: String) -> String { presencePrefix + room + "/" + relay }
    /// Written by a relay whose watch has been quiet, to see that the watch still brings news.
    static func canary(_ relay: String) -> String { canaryPrefix + relay }
}

/// A live relay as it registered itself.
public struct ClusterRelayRecord: Sendable, Equatable, Codable {
    /// Where clients reach it, "HOST:PORT".
    public var address: String
    /// Its X25519 public key in invite form (base64url), which clients sent there pin; empty
    /// for a relay started `--insecure`.
    public var key: String
    /// Active members it forwards for, as it last reported.
    public var load: Int
    public var region: String?
    /// Its lease, so another relay can claim a room for it that lives and dies with it.
    public var lease: String

    public init(address: String, key: String, load: Int, region: String?, lease: Int64) {
        self.address = address
        self.key = key
        self.load = load
        self.region = region
        self.lease = "\(lease)"
    }

    public var id: String { address }
    var leaseID: Int64? { Int64(lease) }

    var encoded: [UInt8] { ClusterCoding.encode(self) }

    /// The record, when it is one a relay can act on: anyone who can write to the store can
    /// put any bytes under a relay's key, and one record a `joined` cannot carry (an address
    /// over 255 bytes) made every join in the cluster fail. So a record is read only with an
    /// address of HOST:PORT that fits a one-byte length, a key that is a relay key (or none,
    /// for an `--insecure` relay), a region a relay could be started with, and a lease.
    static func decode(_ bytes: [UInt8]) -> ClusterRelayRecord? {
        guard let record = ClusterCoding.decode(Self.self, bytes), record.problem == nil else { return nil }
        return record
    }

    /// Why this record names no relay a client can be sent to; nil when it does.
    var problem: String? {
        guard address.utf8.count <= ControlMessage.maximumShortTextBytes, (try? HostAndPort(parsing: address)) != nil else {
            return "its address is not HOST:PORT of at most \(ControlMessage.maximumShortTextBytes) bytes"
        }
        if !key.isEmpty, (try? RelayKey.publicKey(fromText: key)) == nil { return "its key is not a relay's public key" }
        if let region, ParleyNames.problem(withRegion: region) != nil { return "its region is not a region's name" }
        guard load >= 0, leaseID != nil else { return "its load or lease is not a number a relay writes" }
        return nil
    }
}

extension ClusterRelayRecord {
    /// The record as a client needs it (a redirect, a fallback); nil when its key is
    /// unreadable or its address does not fit a control message.
    var clientRelay: ControlMessage.ClusterRelay? {
        guard address.utf8.count <= ControlMessage.maximumShortTextBytes else { return nil }
        if key.isEmpty { return ControlMessage.ClusterRelay(address: address, publicKey: []) }
        guard let bytes = Base64URL.decode(key), bytes.count == ControlMessage.ClusterRelay.keySize else { return nil }
        return ControlMessage.ClusterRelay(address: address, publicKey: bytes)
    }
}

extension RelayPeer {
    /// The relay a cluster record names, as trunks know it; nil for a relay started
    /// `--insecure` (it has no key to prove) or a record whose address is not HOST:PORT.
    init?(_ record: ClusterRelayRecord) {
        guard !record.key.isEmpty, let address = try? HostAndPort(parsing: record.address),
              let peer = try? RelayPeer(address: address, publicKeyText: record.key) else { return nil }
        self = peer
    }
}

/// A room's placement: the relay that hosts it.
struct RoomPlacementRecord: Sendable, Equatable, Codable {
    var relay: String

    var encoded: [UInt8] { ClusterCoding.encode(self) }
    static func decode(_ bytes: [UInt8]) -> RoomPlacementRecord? { ClusterCoding.decode(Self.self, bytes) }
}

enum ClusterCoding {
    /// Sorted keys, so the same record always has the same bytes (a release compares them).
    static func encode(_ value: some Encodable) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)).map(Array.init) ?? []
    }

    /// Nil for anything that is not a record Parley wrote: the store is shared, and a stray
    /// key must not stop a relay.
    static func decode<Value: Decodable>(_ type: Value.Type, _ bytes: [UInt8]) -> Value? {
        guard bytes.count <= 4096 else { return nil }
        return try? JSONDecoder().decode(type, from: Data(bytes))
    }
}
