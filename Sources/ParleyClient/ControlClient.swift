import Foundation

/// `parley ctl`'s side of the control socket: connect, send one request line, read the one
/// reply line. Plain blocking calls with a deadline: one request needs no event loop.
public enum ControlClient {
    /// The longest reply read (a status of a large room is a few KiB).
    static let maximumReplyBytes = 1 << 20

    /// Sends `control` to the call listening at `path` and returns its reply.
    public static func send(_ control: CallControl, to path: String, timeoutSeconds: Int = 5) throws(ControlSocketError) -> CallControlReply {
        let socket = try connect(path: path)
        defer { close(socket) }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let request = Array((control.line + "\n").utf8)
        var sent = 0
        while sent < request.count {
            let written = request[sent...].withUnsafeBytes { Glibc.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { throw .noCall("the call at \(path) stopped listening: \(String(cString: strerror(errno)))") }
            sent += written
        }
        var reply = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 4_096)
        while !reply.contains(0x0A) {
            let count = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            if count < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                throw .badReply("the call at \(path) did not answer within \(timeoutSeconds) s")
            }
            guard count > 0 else { throw .badReply("the call at \(path) hung up without answering") }
            reply += chunk[0..<count]
            guard reply.count <= maximumReplyBytes else { throw .badReply("the call's answer is longer than \(maximumReplyBytes) bytes") }
        }
        let line = reply.prefix { $0 != 0x0A }
        do {
            return try CallControlReply(line: Data(line))
        } catch {
            throw .badReply("the call's answer is not the control protocol's JSON: \(String(decoding: line.prefix(200), as: UTF8.self))")
        }
    }

    /// Whether a call answers at `path` (a socket file left by a call that died does not).
    public static func isAnswering(path: String) -> Bool {
        guard let socket = try? connect(path: path) else { return false }
        close(socket)
        return true
    }

    private static func connect(path: String) throws(ControlSocketError) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else { throw .noCall("the socket path \(path) is longer than \(capacity - 1) bytes; use a shorter --call name") }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in bytes.enumerated() { buffer[index] = byte }
        }
        let socket = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard socket >= 0 else { throw .noCall("cannot open a socket: \(String(cString: strerror(errno)))") }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            let reason = String(cString: strerror(errno))
            close(socket)
            throw .noCall("no call answers at \(path) (\(reason)); is it still running?")
        }
        return socket
    }
}
