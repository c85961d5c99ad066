import NIOCore
import ParleyDatagrams

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Opens one of the relay's UDP sockets: non-blocking, sharing its port with the other loops'
/// sockets (SO_REUSEPORT), with the buffers asked for, its datagrams sent with don't-fragment,
/// bound to `address`.
///
/// Each ``DatagramLoop`` reads and writes its socket itself (``DatagramReceiveBatch``,
/// ``DatagramSendBatch``); the worker closes it when the relay stops.
enum RelaySocket {
    static func bound(to address: SocketAddress, bufferBytes: Int) throws -> CInt {
        let family: CInt
        switch address {
        case .v4: family = AF_INET
        case .v6: family = AF_INET6
        case .unixDomainSocket: throw ConfigurationError("the relay listens on an IP address, not \(address)")
        }
        let descriptor = socket(family, CInt(SOCK_DGRAM.rawValue) | CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw failure("socket", errno, address) }
        do {
            // Every loop's socket shares the port; the kernel spreads sources over them by hash.
            // SO_REUSEPORT lets only sockets of the same user share it; SO_REUSEADDR is left
            // off, since on a UDP port it would let any local user bind beside the relay.
            try set(descriptor, SO_REUSEPORT, 1, address: address)
            try set(descriptor, SO_RCVBUF, CInt(clamping: bufferBytes), address: address)
            try set(descriptor, SO_SNDBUF, CInt(clamping: bufferBytes), address: address)
            setDontFragment(descriptor, family: family)
            let result = address.withSockAddr { pointer, size in bind(descriptor, pointer, socklen_t(size)) }
            guard result == 0 else { throw failure("bind", errno, address) }
            return descriptor
        } catch {
            close(descriptor)
            throw error
        }
    }

    /// Every datagram leaves with don't-fragment set, whatever the path MTU the kernel has
    /// learnt (`IP_PMTUDISC_PROBE`, as QUIC stacks send). Voice packets are a few hundred
    /// bytes, and a fragmented datagram is lost whole when any fragment is, so fragmenting
    /// buys nothing; and an IPv4 datagram that may not be fragmented needs no identification,
    /// which the kernel otherwise draws from a keyed hash for every copy (`__ip_select_ident`,
    /// 7 % of the relay's thread at fan-out 1). A copy larger than the interface's MTU is
    /// refused by the kernel (EMSGSIZE), counted as `send_failed` and logged with what to do.
    /// Best effort: a kernel without the option sends as before.
    static func setDontFragment(_ descriptor: CInt, family: CInt) {
        var probe = CInt(IP_PMTUDISC_PROBE)
        let size = socklen_t(MemoryLayout<CInt>.size)
        // On an IPv6 socket the IPv4 option covers IPv4-mapped peers.
        _ = setsockopt(descriptor, CInt(IPPROTO_IP), IP_MTU_DISCOVER, &probe, size)
        if family == AF_INET6 {
            var probe6 = CInt(IPV6_PMTUDISC_PROBE)
            _ = setsockopt(descriptor, CInt(IPPROTO_IPV6), IPV6_MTU_DISCOVER, &probe6, size)
        }
    }

    /// The path-MTU discovery mode of an IPv4 socket (`IP_PMTUDISC_*`), or nil if it cannot be read.
    static func ipv4MTUDiscovery(of descriptor: CInt) -> CInt? {
        var value: CInt = 0
        var length = socklen_t(MemoryLayout<CInt>.size)
        guard getsockopt(descriptor, CInt(IPPROTO_IP), IP_MTU_DISCOVER, &value, &length) == 0 else { return nil }
        return value
    }

    /// The address the socket is bound to (the port the kernel chose, when 0 was asked for).
    static func localAddress(of descriptor: CInt) throws -> SocketAddress {
        var storage = sockaddr_in6()
        var length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard result == 0, let address = DatagramAddress(storage: storage, length: length).socketAddress else {
            throw ConfigurationError("cannot read the relay socket's address: \(String(cString: strerror(errno)))")
        }
        return address
    }

    /// The receive and send buffer sizes the kernel granted, in payload bytes (Linux reports
    /// twice the payload, the rest being its bookkeeping).
    static func bufferSizes(of descriptor: CInt) -> (receive: Int, send: Int) {
        func get(_ option: CInt) -> Int {
            var value: CInt = 0
            var length = socklen_t(MemoryLayout<CInt>.size)
            guard getsockopt(descriptor, SOL_SOCKET, option, &value, &length) == 0 else { return 0 }
            return Int(value) / 2
        }
        return (get(SO_RCVBUF), get(SO_SNDBUF))
    }

    /// What went wrong, said for the person starting the relay.
    private static func failure(_ call: String, _ code: CInt, _ address: SocketAddress) -> ConfigurationError {
        let place = Relay.describe(address)
        switch (call, code) {
        case ("bind", EADDRINUSE):
            return ConfigurationError("cannot listen on \(place): the port is in use by another program (another relay?); stop it or choose another --listen port")
        case ("bind", EADDRNOTAVAIL):
            return ConfigurationError("cannot listen on \(place): this machine has no such address; use one of its addresses, or 0.0.0.0 for all")
        case ("bind", EACCES):
            return ConfigurationError("cannot listen on \(place): ports below 1024 need root or CAP_NET_BIND_SERVICE; choose a port above 1023")
        default:
            return ConfigurationError("cannot open the relay's socket on \(place): \(call) failed: \(String(cString: strerror(code))) (errno \(code))")
        }
    }

    private static func set(_ descriptor: CInt, _ option: CInt, _ value: CInt, address: SocketAddress) throws {
        var value = value
        guard setsockopt(descriptor, SOL_SOCKET, option, &value, socklen_t(MemoryLayout<CInt>.size)) == 0 else {
            throw failure("setsockopt", errno, address)
        }
    }
}
