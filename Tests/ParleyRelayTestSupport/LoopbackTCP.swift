#if canImport(Glibc)
import Glibc
#endif

/// A TCP connection to a port on 127.0.0.1 that sends what the test says, and no more.
package final class LoopbackTCP {
    package let descriptor: Int32

    /// `receiveBuffer`: a socket buffer this small, asked for before connecting (a peer that
    /// reads slowly).
    package init?(port: Int, receiveBuffer: Int32? = nil) {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        if var size = receiveBuffer {
            setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(descriptor)
            return nil
        }
    }

    deinit { close(descriptor) }

    package func send(_ text: String) { _ = Array(text.utf8).withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }

    /// Whether the relay has closed its end (the next read says end of file, or reset).
    package var closedByRelay: Bool {
        var probe = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&probe, 1, 0) > 0 else { return false }
        var byte: UInt8 = 0
        return recv(descriptor, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) <= 0
    }
}
