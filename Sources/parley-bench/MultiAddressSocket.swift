import ArgumentParser
import CParleyNet

#if canImport(Glibc)
import Glibc
#endif

/// One UDP socket bound to 0.0.0.0:port that sends from, and receives for, many loopback
/// addresses, in batches.
final class MultiAddressSocket {
    static let batch = 256
    static let slot = 2048
    static let controlSpace = 32  // CMSG_SPACE(sizeof(struct in_pktinfo))
    /// Room for a received datagram's IP_PKTINFO and SO_TIMESTAMPNS messages (32 bytes each).
    static let receiveControlSpace = 128

    let descriptor: Int32
    let port: UInt16
    private var destination: sockaddr_in
    private let sendBuffers = UnsafeMutableRawPointer.allocate(byteCount: batch * slot, alignment: 16)
    private let sendControl = UnsafeMutableRawPointer.allocate(byteCount: batch * controlSpace, alignment: 16)
    private let sendVectors = UnsafeMutablePointer<iovec>.allocate(capacity: batch)
    private let sendHeaders = UnsafeMutablePointer<parley_mmsghdr>.allocate(capacity: batch)
    private let receiveBuffers = UnsafeMutableRawPointer.allocate(byteCount: batch * slot, alignment: 16)
    private let receiveControl = UnsafeMutableRawPointer.allocate(byteCount: batch * receiveControlSpace, alignment: 16)
    private let receiveVectors = UnsafeMutablePointer<iovec>.allocate(capacity: batch)
    private let receiveHeaders = UnsafeMutablePointer<parley_mmsghdr>.allocate(capacity: batch)
    /// Destinations other than the socket's own, by source address (network order): members
    /// of one room on two relays (``TrunkBenchmark``). Empty for every other benchmark.
    var routes: [UInt32: sockaddr_in] = [:]
    private let sendNames = UnsafeMutablePointer<sockaddr_in>.allocate(capacity: batch)
    private(set) var queued = 0
    /// When the datagram being handled in `receive` reached this socket (CLOCK_REALTIME, ns):
    /// the kernel's timestamp, so the latency measured is the forwarder's and the network's,
    /// not the time this busy generator took to get round to reading it.
    private(set) var lastArrivalNanoseconds: UInt64 = 0

    init(destination: sockaddr_in) throws {
        self.destination = destination
        let descriptor = Glibc.socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        self.descriptor = descriptor
        var on: Int32 = 1
        setsockopt(descriptor, Int32(IPPROTO_IP), 8 /* IP_PKTINFO */, &on, 4)
        setsockopt(descriptor, SOL_SOCKET, 35 /* SO_TIMESTAMPNS */, &on, 4)
        var size: Int32 = 4 << 20
        setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, 4)
        setsockopt(descriptor, SOL_SOCKET, SO_SNDBUF, &size, 4)
        var any = sockaddr_in()
        any.sin_family = sa_family_t(AF_INET)
        let bound = withUnsafePointer(to: &any) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw ValidationError("cannot bind the load generator's socket") }
        var local = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        port = UInt16(bigEndian: local.sin_port)
    }

    deinit {
        close(descriptor)
        for pointer in [sendBuffers, sendControl, receiveBuffers, receiveControl] { pointer.deallocate() }
        sendVectors.deallocate(); sendHeaders.deallocate(); sendNames.deallocate(); receiveVectors.deallocate(); receiveHeaders.deallocate()
    }

    /// Queues a datagram to the forwarder from `source` (its IP picks the member).
    func queue(_ bytes: [UInt8], from source: sockaddr_in) {
        if queued == Self.batch { flush() }
        let slot = queued
        bytes.withUnsafeBytes { (sendBuffers + slot * Self.slot).copyMemory(from: $0.baseAddress!, byteCount: min($0.count, Self.slot)) }
        // struct cmsghdr { size_t len; int level; int type; } then struct in_pktinfo { int ifindex; in_addr spec_dst; in_addr addr; }
        let control = sendControl + slot * Self.controlSpace
        control.initializeMemory(as: UInt8.self, repeating: 0, count: Self.controlSpace)
        control.storeBytes(of: 28, as: Int.self)  // CMSG_LEN(12)
        control.storeBytes(of: Int32(IPPROTO_IP), toByteOffset: 8, as: Int32.self)
        control.storeBytes(of: Int32(8), toByteOffset: 12, as: Int32.self)  // IP_PKTINFO
        control.storeBytes(of: source.sin_addr.s_addr, toByteOffset: 20, as: UInt32.self)  // ipi_spec_dst
        sendVectors[slot] = iovec(iov_base: sendBuffers + slot * Self.slot, iov_len: min(bytes.count, Self.slot))
        sendHeaders[slot] = parley_mmsghdr()
        if routes.isEmpty {
            withUnsafeMutablePointer(to: &destination) { pointer in
                sendHeaders[slot].msg_hdr.msg_name = UnsafeMutableRawPointer(pointer)
            }
        } else {
            sendNames[slot] = routes[source.sin_addr.s_addr] ?? destination
            sendHeaders[slot].msg_hdr.msg_name = UnsafeMutableRawPointer(sendNames + slot)
        }
        sendHeaders[slot].msg_hdr.msg_namelen = socklen_t(MemoryLayout<sockaddr_in>.size)
        sendHeaders[slot].msg_hdr.msg_iov = sendVectors + slot
        sendHeaders[slot].msg_hdr.msg_iovlen = 1
        sendHeaders[slot].msg_hdr.msg_control = control
        sendHeaders[slot].msg_hdr.msg_controllen = Self.controlSpace
        queued += 1
    }

    func flush() {
        var sent = 0
        while sent < queued {
            let result = parley_sendmmsg(descriptor, sendHeaders + sent, UInt32(queued - sent), 0)
            if result <= 0 {
                if errno == EAGAIN || errno == ENOBUFS { usleep(50); continue }
                break
            }
            sent += Int(result)
        }
        queued = 0
    }

    /// Reads every waiting datagram; `handle` gets its destination IPv4 address (network
    /// order) and bytes (valid during the call).
    func receive(_ handle: (UInt32, UnsafeRawBufferPointer) -> Void) {
        while true {
            for slot in 0..<Self.batch {
                receiveVectors[slot] = iovec(iov_base: receiveBuffers + slot * Self.slot, iov_len: Self.slot)
                receiveHeaders[slot] = parley_mmsghdr()
                receiveHeaders[slot].msg_hdr.msg_iov = receiveVectors + slot
                receiveHeaders[slot].msg_hdr.msg_iovlen = 1
                receiveHeaders[slot].msg_hdr.msg_control = receiveControl + slot * Self.receiveControlSpace
                receiveHeaders[slot].msg_hdr.msg_controllen = Self.receiveControlSpace
            }
            let count = parley_recvmmsg(descriptor, receiveHeaders, UInt32(Self.batch), Int32(MSG_DONTWAIT))
            guard count > 0 else { return }
            let readAt = realtimeNanoseconds()
            for slot in 0..<Int(count) {
                var destinationAddress: UInt32 = 0
                lastArrivalNanoseconds = readAt
                // struct cmsghdr { size_t len; int level; int type; } then the data, each
                // message padded to 8 bytes.
                let control = receiveControl + slot * Self.receiveControlSpace
                let controlLength = min(Int(receiveHeaders[slot].msg_hdr.msg_controllen), Self.receiveControlSpace)
                var offset = 0
                while offset + 16 <= controlLength {
                    let length = control.load(fromByteOffset: offset, as: Int.self)
                    guard length >= 16, offset + length <= controlLength else { break }
                    let level = control.load(fromByteOffset: offset + 8, as: Int32.self)
                    let type = control.load(fromByteOffset: offset + 12, as: Int32.self)
                    if level == Int32(IPPROTO_IP), type == 8, length >= 28 {  // IP_PKTINFO
                        destinationAddress = control.load(fromByteOffset: offset + 24, as: UInt32.self)  // ipi_addr
                    } else if level == SOL_SOCKET, type == 35, length >= 32 {  // SCM_TIMESTAMPNS
                        let seconds = control.load(fromByteOffset: offset + 16, as: Int.self)
                        let nanoseconds = control.load(fromByteOffset: offset + 24, as: Int.self)
                        lastArrivalNanoseconds = UInt64(seconds) * 1_000_000_000 + UInt64(nanoseconds)
                    }
                    offset += (length + 7) & ~7
                }
                handle(destinationAddress, UnsafeRawBufferPointer(start: receiveBuffers + slot * Self.slot, count: Int(receiveHeaders[slot].msg_len)))
            }
            if Int(count) < Self.batch { return }
        }
    }
}

/// Member `number`'s address: 127.1.x.y on the generator's port.
func memberAddress(_ number: Int, port: UInt16) -> sockaddr_in {
    var address = loopbackAddress(port: port)
    let host = UInt32(127) << 24 | UInt32(1) << 16 | UInt32(number / 250) << 8 | UInt32(number % 250 + 1)
    address.sin_addr.s_addr = host.bigEndian
    return address
}

/// The inverse of ``memberAddress(_:port:)``, from an IPv4 address in network order.
func memberIndex(_ destination: UInt32) -> Int? {
    let host = UInt32(bigEndian: destination)
    guard host >> 16 == 127 << 8 | 1 else { return nil }
    let third = Int((host >> 8) & 0xFF), fourth = Int(host & 0xFF)
    guard fourth >= 1 && fourth <= 250 else { return nil }
    return third * 250 + fourth - 1
}
