import NIOCore
import ParleyDatagrams
import ParleyWire

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A UDP peer's address as a small value, the key of the relay's session tables.
///
/// `SocketAddress` is hashable too, but hashing it on every packet walks an enum with a
/// host string inside; this is two words and a port, so the per-packet lookup is cheap.
struct PeerAddress: Hashable, Sendable, CustomStringConvertible {
    /// IPv4 addresses sit in the low 32 bits of `low` (network byte order) with `high` zero
    /// and `isIPv6` false; IPv6 addresses fill both words.
    let high: UInt64
    let low: UInt64
    /// Host byte order.
    let port: UInt16
    let isIPv6: Bool

    init(high: UInt64, low: UInt64, port: UInt16, isIPv6: Bool) {
        self.high = high
        self.low = low
        self.port = port
        self.isIPv6 = isIPv6
    }

    /// The key of an address given the public API's way; nil for a Unix-domain one.
    init?(_ address: SocketAddress) {
        self.init(DatagramAddress(address))
    }

    /// The key of a datagram's source, straight from the address the kernel wrote; nil for
    /// a family other than IPv4 and IPv6.
    @inline(__always)
    init?(_ address: DatagramAddress) {
        var storage = address.storage
        switch Int32(address.family) {
        case AF_INET:
            let v4 = withUnsafeBytes(of: &storage) { $0.loadUnaligned(as: sockaddr_in.self) }
            high = 0
            low = UInt64(v4.sin_addr.s_addr)
            port = UInt16(bigEndian: v4.sin_port)
            isIPv6 = false
        case AF_INET6:
            let words = withUnsafeBytes(of: &storage.sin6_addr) { raw in
                (raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self), raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            }
            high = words.0
            low = words.1
            port = UInt16(bigEndian: storage.sin6_port)
            isIPv6 = true
        default:
            return nil
        }
    }

    /// The IPv4 address's four bytes in order, when this is IPv4.
    private var ipv4Bytes: (UInt8, UInt8, UInt8, UInt8)? {
        guard !isIPv6 else { return nil }
        let value = UInt32(truncatingIfNeeded: low)  // network order in memory
        return withUnsafeBytes(of: value) { ($0[0], $0[1], $0[2], $0[3]) }
    }

    /// Whether the relay may send to this address at all.
    ///
    /// A forged source (port 0, a multicast, broadcast or unspecified address) is never
    /// answered: a reply could not reach a real client, and would make the relay an
    /// amplifier aimed at a group or a whole network.
    var canBeAnswered: Bool {
        guard port != 0 else { return false }
        if let bytes = ipv4Bytes {
            // 0.0.0.0/8 is "this network"; 224/4 multicast; 240/4 reserved and broadcast.
            return bytes.0 != 0 && bytes.0 < 224
        }
        let firstByte = UInt8(truncatingIfNeeded: high)  // first byte in memory order
        if firstByte == 0xFF { return false }  // IPv6 multicast ff00::/8
        if high == 0 && low == 0 { return false }  // ::
        return true
    }

    /// The address as a STUN answer's XOR-MAPPED-ADDRESS gives it.
    var stunAddress: STUNAddress? {
        if let bytes = ipv4Bytes {
            return .ipv4(UInt32(bytes.0) << 24 | UInt32(bytes.1) << 16 | UInt32(bytes.2) << 8 | UInt32(bytes.3), port: port)
        }
        // The words hold the address in memory order: big-endian values read back in host order.
        return .ipv6(high: UInt64(bigEndian: high), low: UInt64(bigEndian: low), port: port)
    }

    /// The host this address belongs to, what per-source limits count: many ports of one
    /// machine are one source.
    var host: SourceHost { SourceHost(self) }

    /// The address as bytes, what an address cookie is bound to.
    var cookieBytes: [UInt8] {
        [UInt8](unsafeUninitializedCapacity: 19) { buffer, count in
            let raw = UnsafeMutableRawBufferPointer(buffer)
            raw.storeBytes(of: high, toByteOffset: 0, as: UInt64.self)
            raw.storeBytes(of: low, toByteOffset: 8, as: UInt64.self)
            raw.storeBytes(of: port.bigEndian, toByteOffset: 16, as: UInt16.self)
            raw[18] = isIPv6 ? 6 : 4
            count = 19
        }
    }

    /// Two words into the hasher instead of four fields: this runs for every datagram.
    func hash(into hasher: inout Hasher) {
        hasher.combine(low ^ (high &* 0x9E37_79B9_7F4A_7C15))
        hasher.combine(UInt32(port) | (isIPv6 ? 1 << 16 : 0))
    }

    var description: String {
        if let (a, b, c, d) = ipv4Bytes { return "\(a).\(b).\(c).\(d):\(port)" }
        var groups: [String] = []
        withUnsafeBytes(of: (high, low)) { raw in
            for index in stride(from: 0, to: 16, by: 2) {
                groups.append(String(UInt16(raw[index]) << 8 | UInt16(raw[index + 1]), radix: 16))
            }
        }
        return "[\(groups.joined(separator: ":"))]:\(port)"
    }
}

/// The part of an address that names one machine or one site, the key of the relay's
/// per-source limits: an IPv4 address, or an IPv6 /64, the block one host or one home is
/// given, which a single machine can fill with addresses of its own. Addresses in ::/64
/// (IPv4-mapped addresses on a dual-stack socket, ::1) count whole, as IPv4 does.
struct SourceHost: Hashable, Sendable, CustomStringConvertible {
    let high: UInt64
    let low: UInt64
    let isIPv6: Bool

    init(_ address: PeerAddress) {
        isIPv6 = address.isIPv6
        if address.isIPv6 && address.high != 0 {
            high = address.high
            low = 0
        } else {
            high = address.high
            low = address.low
        }
    }

    /// The key's bytes, for tables kept outside the relay (the handshake replay cache).
    var bytes: [UInt8] {
        var bytes = withUnsafeBytes(of: (high, low), Array.init)
        bytes.append(isIPv6 ? 6 : 4)
        return bytes
    }

    var description: String {
        let address = PeerAddress(high: high, low: low, port: 0, isIPv6: isIPv6)
        let text = address.description
        // Without the port (":0"), and with "/64" where the key is a prefix.
        let host = String(text.dropLast(2))
        return isIPv6 && high != 0 ? host.dropFirst().dropLast() + "/64" : host
    }
}
