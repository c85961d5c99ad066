import CParleyNet

#if canImport(Glibc)
import Glibc
#endif

/// The minimal forwarder: one thread pinned to the same CPU, recvmmsg a batch, look each
/// source port up in a table of room-mates, sendmmsg one copy per room-mate. No parsing,
/// no checks, no control protocol: what forwarding costs with nothing else.
final class BaselineForwarder: ForwarderUnderTest, @unchecked Sendable {
    let descriptor: Int32
    let port: UInt16
    /// (IPv4 address << 16 | port) of a member → its room-mates.
    private var table: [UInt64: [sockaddr_in]] = [:]
    private var thread: pthread_t?
    private var threadID: pid_t = 0
    private let running = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
    let cpu: Int

    init(cpu: Int) throws {
        self.cpu = cpu
        descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var size: Int32 = 4 << 20
        setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, 4)
        setsockopt(descriptor, SOL_SOCKET, SO_SNDBUF, &size, 4)
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        port = bindLoopback(descriptor)
        running.pointee = 1
    }

    var entry: MemberEntry { .table { self.setRooms($0) } }

    /// Fills the table of room-mates and starts forwarding.
    private func setRooms(_ rooms: [[sockaddr_in]]) {
        for room in rooms {
            for member in room {
                table[Self.key(member)] = room.filter { Self.key($0) != Self.key(member) }
            }
        }
        let box = Unmanaged.passRetained(self)
        var handle = pthread_t()
        pthread_create(&handle, nil, { argument in
            let forwarder = Unmanaged<BaselineForwarder>.fromOpaque(argument!).takeRetainedValue()
            forwarder.loop()
            return nil
        }, box.toOpaque())
        thread = handle
        while threadIDValue() == 0 { usleep(1000) }
    }

    static func key(_ address: sockaddr_in) -> UInt64 {
        UInt64(address.sin_addr.s_addr) << 16 | UInt64(address.sin_port)
    }

    private let threadIDBox = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
    private func threadIDValue() -> pid_t { threadIDBox.pointee }

    private func loop() {
        threadIDBox.pointee = currentThreadID()
        pin(cpu: cpu)
        let batch = 64
        let slot = 2048
        let buffers = UnsafeMutableRawPointer.allocate(byteCount: batch * slot, alignment: 16)
        var names = [sockaddr_in](repeating: sockaddr_in(), count: batch)
        var vectors = [iovec](repeating: iovec(), count: batch)
        var headers = [parley_mmsghdr](repeating: parley_mmsghdr(), count: batch)
        let outCapacity = batch * 64
        var outVectors = [iovec](repeating: iovec(), count: outCapacity)
        var outNames = [sockaddr_in](repeating: sockaddr_in(), count: outCapacity)
        var outHeaders = [parley_mmsghdr](repeating: parley_mmsghdr(), count: outCapacity)
        while running.pointee != 0 {
            let received: Int32 = names.withUnsafeMutableBufferPointer { namePointer in
                vectors.withUnsafeMutableBufferPointer { vectorPointer in
                    headers.withUnsafeMutableBufferPointer { headerPointer in
                        for index in 0..<batch {
                            vectorPointer[index] = iovec(iov_base: buffers + index * slot, iov_len: slot)
                            headerPointer[index] = parley_mmsghdr()
                            headerPointer[index].msg_hdr.msg_name = UnsafeMutableRawPointer(namePointer.baseAddress! + index)
                            headerPointer[index].msg_hdr.msg_namelen = socklen_t(MemoryLayout<sockaddr_in>.size)
                            headerPointer[index].msg_hdr.msg_iov = vectorPointer.baseAddress! + index
                            headerPointer[index].msg_hdr.msg_iovlen = 1
                        }
                        return parley_recvmmsg(descriptor, headerPointer.baseAddress, UInt32(batch), Int32(MSG_WAITFORONE))
                    }
                }
            }
            guard received > 0 else { continue }
            var count = 0
            for index in 0..<Int(received) {
                guard let destinations = table[Self.key(names[index])] else { continue }
                for destination in destinations where count < outCapacity {
                    outNames[count] = destination
                    outVectors[count] = iovec(iov_base: buffers + index * slot, iov_len: Int(headers[index].msg_len))
                    count += 1
                }
            }
            var sent = 0
            while sent < count {
                let result: Int32 = outNames.withUnsafeMutableBufferPointer { namePointer in
                    outVectors.withUnsafeMutableBufferPointer { vectorPointer in
                        outHeaders.withUnsafeMutableBufferPointer { headerPointer in
                            for index in sent..<count {
                                headerPointer[index] = parley_mmsghdr()
                                headerPointer[index].msg_hdr.msg_name = UnsafeMutableRawPointer(namePointer.baseAddress! + index)
                                headerPointer[index].msg_hdr.msg_namelen = socklen_t(MemoryLayout<sockaddr_in>.size)
                                headerPointer[index].msg_hdr.msg_iov = vectorPointer.baseAddress! + index
                                headerPointer[index].msg_hdr.msg_iovlen = 1
                            }
                            return parley_sendmmsg(descriptor, headerPointer.baseAddress! + sent, UInt32(count - sent), 0)
                        }
                    }
                }
                if result <= 0 { break }  // a full socket drops the rest, as the relay does
                sent += Int(result)
            }
        }
        buffers.deallocate()
    }

    func cpuSeconds() -> Double {
        threadIDValue() == 0 ? 0 : processCPUSeconds(path: "/proc/self/task/\(threadIDValue())/stat")
    }

    func stop() {
        running.pointee = 0
        if let thread { pthread_join(thread, nil) }
        close(descriptor)
    }
}
