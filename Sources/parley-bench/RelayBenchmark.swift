import ArgumentParser
// NIO's own C shim: recvmmsg, sendmmsg, epoll and CPU affinity, which Glibc's module map leaves out.
import CNIOLinux
import ParleyRelay
import ParleyWire

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// `parley-bench relay`: the release `parley-relay serve` pinned to CPU 0, a load generator
/// pinned to CPU 1, R rooms × P members talking at 50 packets/s with ~100-byte payloads that
/// carry their send time. For fan-out 1, 4 and 9 (P = 2, 5, 10) it finds the highest
/// forwarded packets/s with less than 0.1 % loss, then measures latency at half that load.
/// In the same run, the same traffic goes through a minimal baseline forwarder (a plain
/// recvmmsg/sendmmsg loop written below, room logic reduced to a table lookup, also pinned
/// to CPU 0), and the relay's figures are reported as ratios of the baseline's.
struct RelayBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay",
        abstract: "Forwarding capacity and latency of parley-relay against a minimal recvmmsg/sendmmsg forwarder.",
        discussion: """
        Build the relay in release first:
          swift build -c release --product parley-relay && swift build -c release --product parley-bench
          .build/release/parley-bench relay --json
        """
    )

    @Option(help: "Fan-outs to measure (receivers per packet), comma-separated.")
    var fanouts: String = "1,4,9"
    @Option(help: "Seconds of traffic per trial (after 0.5 s of warm-up).")
    var seconds: Double = 3
    @Option(help: "Bytes of RTP payload per packet.")
    var payload: Int = 100
    @Option(help: "The parley-relay binary (default: beside this one).")
    var relayBinary: String?
    @Option(help: "CPU for the relay and the baseline forwarder.")
    var forwarderCPU: Int = 0
    @Option(help: "CPU for the load generator.")
    var loadCPU: Int = 1
    @Option(help: "Largest number of talkers tried (bounds sockets and search time).")
    var maximumTalkers: Int = 6000
    @Flag(help: "Print the results as JSON on stdout.")
    var json = false

    static let packetsPerSecondPerTalker = 50.0
    static let lossThreshold = 0.001

    func run() throws {
        raiseFileLimit()
        pin(cpu: loadCPU)
        let binary = try relayBinary ?? Self.siblingRelayBinary()
        let fanoutList = fanouts.split(separator: ",").compactMap { Int($0.filter { $0 != " " }) }
        guard !fanoutList.isEmpty, fanoutList.allSatisfy({ (1...50).contains($0) }) else {
            throw ValidationError("--fanouts takes numbers from 1 to 50, e.g. 1,4,9")
        }
        var results: [FanoutResult] = []
        for fanout in fanoutList {
            log("fan-out \(fanout): searching the baseline forwarder's capacity")
            let baseline = try findCapacity(fanout: fanout) { try BaselineForwarder(cpu: forwarderCPU) }
            log("fan-out \(fanout): searching parley-relay's capacity")
            let relay = try findCapacity(fanout: fanout) { try RelayProcess(binary: binary, cpu: forwarderCPU) }
            let result = FanoutResult(fanout: fanout, relay: relay, baseline: baseline)
            log(result.summary)
            results.append(result)
        }
        let report = RelayBenchmarkReport(
            payloadBytes: payload, trialSeconds: seconds, lossThreshold: Self.lossThreshold,
            forwarderCPU: forwarderCPU, loadCPU: loadCPU, results: results)
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(report), as: UTF8.self))
        } else {
            print(report.table)
        }
    }

    /// Highest sustained load below the loss threshold (geometric steps, then bisection),
    /// then one trial at half of it for latency.
    func findCapacity(fanout: Int, makeForwarder: () throws -> any Forwarder) throws -> Capacity {
        let members = fanout + 1
        var good: TrialResult?
        var badRooms: Int?
        var rooms = max(1, 2000 / (members * 50 * fanout))  // start near 2,000 forwarded packets/s
        let maximumRooms = maximumTalkers / members
        while badRooms == nil && rooms <= maximumRooms {
            let trial = try runTrial(rooms: rooms, members: members, forwarder: makeForwarder())
            log("  \(trial.line)")
            if trial.loss < Self.lossThreshold { good = trial; rooms *= 2 } else { badRooms = rooms }
        }
        if let bad = badRooms {
            var low = good?.rooms ?? 0
            var high = bad
            while high - low > max(1, high / 16) {
                let middle = (low + high) / 2
                let trial = try runTrial(rooms: middle, members: members, forwarder: makeForwarder())
                log("  \(trial.line)")
                if trial.loss < Self.lossThreshold { good = trial; low = middle } else { high = middle }
            }
        } else {
            log("  stopped at --maximum-talkers \(maximumTalkers) without loss; the figure is a lower bound")
        }
        guard let best = good else { throw ValidationError("even one room of \(members) lost packets; is the machine overloaded?") }
        let halfRooms = max(1, best.rooms / 2)
        let half = try runTrial(rooms: halfRooms, members: members, forwarder: makeForwarder())
        log("  half load: \(half.line)")
        return Capacity(maximum: best, halfLoad: half, reachedTalkerLimit: badRooms == nil)
    }

    func runTrial(rooms: Int, members: Int, forwarder: any Forwarder) throws -> TrialResult {
        defer { forwarder.stop() }
        let generator = try LoadGenerator(rooms: rooms, members: members, payload: payload, forwarder: forwarder)
        return try generator.run(seconds: seconds, forwarder: forwarder)
    }

    static func siblingRelayBinary() throws -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        let path = String(decoding: buffer[..<max(count, 0)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let candidate = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)]) + "/parley-relay"
        guard access(candidate, X_OK) == 0 else {
            throw ValidationError("no parley-relay beside parley-bench; run `swift build -c release --product parley-relay` or pass --relay-binary")
        }
        return candidate
    }
}

// MARK: Results

struct TrialResult: Codable {
    var rooms: Int
    var members: Int
    var offeredPacketsPerSecond: Double
    var forwardedPacketsPerSecond: Double
    var expectedPacketsPerSecond: Double
    var loss: Double
    var duplicates: Int
    var latencyP50Microseconds: Double
    var latencyP99Microseconds: Double
    var latencyP999Microseconds: Double
    /// The forwarder's CPU use, in percent of one core.
    var forwarderCPUPercent: Double

    var line: String {
        "\(rooms) rooms × \(members): \(Int(forwardedPacketsPerSecond)) forwarded/s of \(Int(expectedPacketsPerSecond)), loss \(percent(loss)), latency p50 \(Int(latencyP50Microseconds)) µs p99 \(Int(latencyP99Microseconds)) µs p99.9 \(Int(latencyP999Microseconds)) µs, CPU \(Int(forwarderCPUPercent)) %"
    }
}

struct Capacity: Codable {
    var maximum: TrialResult
    var halfLoad: TrialResult
    var reachedTalkerLimit: Bool
}

struct FanoutResult: Codable {
    var fanout: Int
    var relay: Capacity
    var baseline: Capacity
    var throughputRatio: Double
    var halfLoadP99RelayMicroseconds: Double
    var halfLoadP99BaselineMicroseconds: Double

    init(fanout: Int, relay: Capacity, baseline: Capacity) {
        self.fanout = fanout
        self.relay = relay
        self.baseline = baseline
        throughputRatio = relay.maximum.forwardedPacketsPerSecond / baseline.maximum.forwardedPacketsPerSecond
        halfLoadP99RelayMicroseconds = relay.halfLoad.latencyP99Microseconds
        halfLoadP99BaselineMicroseconds = baseline.halfLoad.latencyP99Microseconds
    }

    var summary: String {
        "fan-out \(fanout): relay \(Int(relay.maximum.forwardedPacketsPerSecond)) pps, baseline \(Int(baseline.maximum.forwardedPacketsPerSecond)) pps, ratio \(percent(throughputRatio)); half-load p99 relay \(Int(halfLoadP99RelayMicroseconds)) µs, baseline \(Int(halfLoadP99BaselineMicroseconds)) µs"
    }
}

struct RelayBenchmarkReport: Codable {
    var payloadBytes: Int
    var trialSeconds: Double
    var lossThreshold: Double
    var forwarderCPU: Int
    var loadCPU: Int
    var results: [FanoutResult]

    var table: String {
        var lines = [
            "| fan-out | relay max pps (<0.1% loss) | baseline max pps | relay/baseline | relay CPU at max | half-load p50 / p99 / p99.9 relay (µs) | half-load p50 / p99 / p99.9 baseline (µs) |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for result in results {
            let r = result.relay, b = result.baseline
            lines.append("| \(result.fanout) | \(Int(r.maximum.forwardedPacketsPerSecond))\(r.reachedTalkerLimit ? "+" : "") | \(Int(b.maximum.forwardedPacketsPerSecond))\(b.reachedTalkerLimit ? "+" : "") | \(percent(result.throughputRatio)) | \(Int(r.maximum.forwarderCPUPercent)) % | \(Int(r.halfLoad.latencyP50Microseconds)) / \(Int(r.halfLoad.latencyP99Microseconds)) / \(Int(r.halfLoad.latencyP999Microseconds)) | \(Int(b.halfLoad.latencyP50Microseconds)) / \(Int(b.halfLoad.latencyP99Microseconds)) / \(Int(b.halfLoad.latencyP999Microseconds)) |")
        }
        return lines.joined(separator: "\n")
    }
}

func percent(_ value: Double) -> String {
    let hundredths = Int((value * 10_000).rounded())
    return "\(hundredths / 100).\(String(repeating: "0", count: hundredths % 100 < 10 ? 1 : 0))\(hundredths % 100) %"
}

func log(_ text: String) {
    var line = Array((text + "\n").utf8)
    while !line.isEmpty {
        let written = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        guard written > 0 else { return }
        line.removeFirst(written)
    }
}

// MARK: The two forwarders

/// Something that forwards a room's packets: the relay process or the baseline.
protocol Forwarder: AnyObject {
    var port: UInt16 { get }
    /// Whether clients must join over the control protocol first.
    var needsJoin: Bool { get }
    /// Tells the forwarder who is in which room (the baseline's lookup table).
    func setRooms(_ rooms: [[UInt16]])
    var token: (String, String) -> String { get }
    /// CPU seconds used so far.
    func cpuSeconds() -> Double
    func stop()
}

/// `parley-relay serve` in its own process, pinned with `taskset -c CPU`.
final class RelayProcess: Forwarder {
    let port: UInt16
    let pid: pid_t
    let secret: TokenSecret
    let secretPath: String
    var needsJoin: Bool { true }

    init(binary: String, cpu: Int) throws {
        port = freeUDPPort()
        secret = .random()
        secretPath = "/tmp/parley-bench-relay-\(getpid()).secret"
        try SecretFile(tokenSecret: secret).write(path: secretPath, overwrite: true)
        let arguments = ["taskset", "-c", "\(cpu)", binary, "serve", "--listen", "127.0.0.1:\(port)", "--admin", "off",
                         "--threads", "1", "--secret-file", secretPath, "--log-level", "error",
                         "--max-rooms", "10000", "--socket-buffer", "4MiB"]
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        guard posix_spawnp(&child, "taskset", nil, nil, argv, environ) == 0 else {
            throw ValidationError("cannot start taskset \(binary); is util-linux installed?")
        }
        pid = child
        usleep(300_000)
    }

    func setRooms(_ rooms: [[UInt16]]) {}

    var token: (String, String) -> String {
        let secret = self.secret
        return { room, identity in
            let now = Int64(time(nil))
            return AccessToken(identity: identity, room: room, issuedAt: now, expiresAt: now + 3600).signed(with: secret)
        }
    }

    func cpuSeconds() -> Double { processCPUSeconds(path: "/proc/\(pid)/stat") }

    func stop() {
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        unlink(secretPath)
    }
}

/// The minimal forwarder: one thread pinned to the same CPU, recvmmsg a batch, look each
/// source port up in a table of room-mates, sendmmsg one copy per room-mate. No parsing,
/// no checks, no control protocol: what forwarding costs with nothing else.
final class BaselineForwarder: Forwarder, @unchecked Sendable {
    let descriptor: Int32
    let port: UInt16
    var needsJoin: Bool { false }
    private var table: [UInt16: [sockaddr_in]] = [:]
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

    func setRooms(_ rooms: [[UInt16]]) {
        for room in rooms {
            for member in room {
                table[member] = room.filter { $0 != member }.map { loopbackAddress(port: $0) }
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

    private let threadIDBox = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
    private func threadIDValue() -> pid_t { threadIDBox.pointee }

    var token: (String, String) -> String { { _, _ in "" } }

    private func loop() {
        threadIDBox.pointee = currentThreadID()
        pin(cpu: cpu)
        let batch = 64
        let slot = 2048
        let buffers = UnsafeMutableRawPointer.allocate(byteCount: batch * slot, alignment: 16)
        var names = [sockaddr_in](repeating: sockaddr_in(), count: batch)
        var vectors = [iovec](repeating: iovec(), count: batch)
        var headers = [CNIOLinux_mmsghdr](repeating: CNIOLinux_mmsghdr(), count: batch)
        let outCapacity = batch * 64
        var outVectors = [iovec](repeating: iovec(), count: outCapacity)
        var outNames = [sockaddr_in](repeating: sockaddr_in(), count: outCapacity)
        var outHeaders = [CNIOLinux_mmsghdr](repeating: CNIOLinux_mmsghdr(), count: outCapacity)
        while running.pointee != 0 {
            let received: Int32 = names.withUnsafeMutableBufferPointer { namePointer in
                vectors.withUnsafeMutableBufferPointer { vectorPointer in
                    headers.withUnsafeMutableBufferPointer { headerPointer in
                        for index in 0..<batch {
                            vectorPointer[index] = iovec(iov_base: buffers + index * slot, iov_len: slot)
                            headerPointer[index] = CNIOLinux_mmsghdr()
                            headerPointer[index].msg_hdr.msg_name = UnsafeMutableRawPointer(namePointer.baseAddress! + index)
                            headerPointer[index].msg_hdr.msg_namelen = socklen_t(MemoryLayout<sockaddr_in>.size)
                            headerPointer[index].msg_hdr.msg_iov = vectorPointer.baseAddress! + index
                            headerPointer[index].msg_hdr.msg_iovlen = 1
                        }
                        return CNIOLinux_recvmmsg(descriptor, headerPointer.baseAddress, UInt32(batch), Int32(MSG_WAITFORONE), nil)
                    }
                }
            }
            guard received > 0 else { continue }
            var count = 0
            for index in 0..<Int(received) {
                let sourcePort = UInt16(bigEndian: names[index].sin_port)
                guard let destinations = table[sourcePort] else { continue }
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
                                headerPointer[index] = CNIOLinux_mmsghdr()
                                headerPointer[index].msg_hdr.msg_name = UnsafeMutableRawPointer(namePointer.baseAddress! + index)
                                headerPointer[index].msg_hdr.msg_namelen = socklen_t(MemoryLayout<sockaddr_in>.size)
                                headerPointer[index].msg_hdr.msg_iov = vectorPointer.baseAddress! + index
                                headerPointer[index].msg_hdr.msg_iovlen = 1
                            }
                            return CNIOLinux_sendmmsg(descriptor, headerPointer.baseAddress! + sent, UInt32(count - sent), 0)
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

// MARK: The load generator

/// Every member's socket, the pacing of 50 packets/s per talker, and what arrives where.
final class LoadGenerator {
    struct Member {
        let descriptor: Int32
        let port: UInt16
        let room: Int
        let ssrc: UInt32
        var sequence: UInt16 = 0
        var sentInWindow = 0
    }

    var members: [Member] = []
    let roomsCount: Int
    let membersPerRoom: Int
    let payload: Int
    let epoll: Int32
    let destination: sockaddr_in

    init(rooms: Int, members: Int, payload: Int, forwarder: any Forwarder) throws {
        roomsCount = rooms
        membersPerRoom = members
        self.payload = max(payload, 24)
        epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        destination = loopbackAddress(port: forwarder.port)
        for room in 0..<rooms {
            for index in 0..<members {
                let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
                guard descriptor >= 0 else { throw ValidationError("out of sockets at \(self.members.count); raise ulimit -n") }
                var size: Int32 = 1 << 20
                setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, 4)
                let port = bindLoopback(descriptor)
                var event = epoll_event()
                event.events = EPOLLIN.rawValue
                event.data.u32 = UInt32(self.members.count)
                epoll_ctl(epoll, EPOLL_CTL_ADD, descriptor, &event)
                self.members.append(Member(descriptor: descriptor, port: port, room: room, ssrc: UInt32(room * 100 + index + 1)))
                _ = index
            }
        }
        let roomPorts = (0..<rooms).map { room in self.members.filter { $0.room == room }.map(\.port) }
        forwarder.setRooms(roomPorts)
        if forwarder.needsJoin { try joinAll(forwarder: forwarder) }
    }

    deinit {
        for member in members { close(member.descriptor) }
        close(epoll)
    }

    /// join → joined → ready → roster for every member, pipelined; acks the rosters.
    private func joinAll(forwarder: any Forwarder) throws {
        var cookies = [UInt64?](repeating: nil, count: members.count)
        var ready = [Bool](repeating: false, count: members.count)
        let deadline = monotonic() + 30
        var lastSend = 0.0
        while ready.contains(false) {
            guard monotonic() < deadline else {
                throw ValidationError("\(ready.filter { !$0 }.count) of \(members.count) members could not join the relay")
            }
            if monotonic() - lastSend > 0.5 {
                lastSend = monotonic()
                for index in members.indices where !ready[index] {
                    let member = members[index]
                    let message: ControlMessage
                    if let cookie = cookies[index] {
                        message = ControlMessage(body: .ready(.init(cookie: cookie)))
                    } else {
                        message = ControlMessage(body: .join(.init(ssrc: member.ssrc, room: "room-\(member.room)",
                                                                   token: forwarder.token("room-\(member.room)", "member-\(index)"), software: "parley-bench")))
                    }
                    send(try message.serialized(), from: member.descriptor)
                }
            }
            drainControl { index, message in
                switch message.body {
                case let .joined(joined):
                    if cookies[index] == nil {
                        cookies[index] = joined.cookie
                        self.send(try! ControlMessage(body: .ready(.init(cookie: joined.cookie))).serialized(), from: self.members[index].descriptor)
                    }
                case .roster:
                    ready[index] = true
                case let .error(error):
                    log("join refused: \(error.code) \(error.message)")
                default: break
                }
            }
        }
        // Let the last rosters settle, so they do not mix with the measurement.
        let settle = monotonic() + 0.3
        while monotonic() < settle { drainControl { _, _ in } }
    }

    /// Reads every waiting datagram; control messages go to `handle` (reliable ones acked).
    private func drainControl(_ handle: (Int, ControlMessage) -> Void) {
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        let ready = epoll_wait(epoll, &events, 256, 10)
        var buffer = [UInt8](repeating: 0, count: 2048)
        for event in events.prefix(Int(max(ready, 0))) {
            let index = Int(event.data.u32)
            while true {
                let count = buffer.withUnsafeMutableBytes { recv(members[index].descriptor, $0.baseAddress, $0.count, 0) }
                guard count > 0 else { break }
                let datagram = Array(buffer[..<count])
                guard datagram[0] == ControlMessage.magic, let message = try? ControlMessage(parsing: datagram) else { continue }
                if message.isReliable { send(try! ControlMessage(body: .ack(.init(sequence: message.sequence))).serialized(), from: members[index].descriptor) }
                handle(index, message)
            }
        }
    }

    private func send(_ bytes: [UInt8], from descriptor: Int32) {
        var address = destination
        _ = bytes.withUnsafeBytes { raw in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(descriptor, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
    }

    /// Sends every member's packets at 50/s for `seconds` after a warm-up, and measures.
    func run(seconds: Double, forwarder: any Forwarder) throws -> TrialResult {
        let talkers = members.count
        let interval = 1.0 / RelayBenchmark.packetsPerSecondPerTalker
        let warmUp = 0.5
        let start = monotonic()
        let windowStart = start + warmUp
        let windowEnd = windowStart + seconds
        let stopSending = windowEnd
        let stopReceiving = windowEnd + 0.3
        var packet = [UInt8](repeating: 0, count: 12 + payload)
        var latencies: [Int64] = []
        latencies.reserveCapacity(Int(Double(talkers) * 50 * seconds) * (membersPerRoom - 1) + 1024)
        var received = 0
        var duplicatesOrStrays = 0
        var cpuAtStart = 0.0
        var cpuAtEnd = 0.0
        var sentTotal = 0
        // Talker i sends at start + (k + i/N) × 20 ms: spread evenly, as independent people would.
        var nextDue = [Double](repeating: 0, count: talkers)
        for index in 0..<talkers { nextDue[index] = start + interval * Double(index) / Double(talkers) }
        var order = Array(0..<talkers)
        var cursor = 0
        var events = [epoll_event](repeating: epoll_event(), count: 1024)
        var headers = [CNIOLinux_mmsghdr](repeating: CNIOLinux_mmsghdr(), count: 32)
        var vectors = [iovec](repeating: iovec(), count: 32)
        let receiveBuffers = UnsafeMutableRawPointer.allocate(byteCount: 32 * 2048, alignment: 16)
        defer { receiveBuffers.deallocate() }
        var measuring = false
        var stoppedMeasuring = false
        order.sort { nextDue[$0] < nextDue[$1] }
        while true {
            let now = monotonic()
            if now >= stopReceiving { break }
            if !measuring && now >= windowStart {
                measuring = true
                cpuAtStart = forwarder.cpuSeconds()
            }
            if measuring && !stoppedMeasuring && now >= windowEnd {
                stoppedMeasuring = true
                cpuAtEnd = forwarder.cpuSeconds()
            }
            // Send what is due (the round-robin order is the due order, since all share one period).
            if now < stopSending {
                var sentNow = 0
                while sentNow < 4096 {
                    let index = order[cursor]
                    guard nextDue[index] <= now else { break }
                    let inWindow = nextDue[index] >= windowStart && nextDue[index] < windowEnd
                    members[index].sequence &+= 1
                    fill(&packet, member: members[index], inWindow: inWindow)
                    send(packet, from: members[index].descriptor)
                    if inWindow { members[index].sentInWindow += 1; sentTotal += 1 }
                    nextDue[index] += interval
                    cursor = (cursor + 1) % talkers
                    sentNow += 1
                }
            }
            // Receive whatever is ready.
            let ready = epoll_wait(epoll, &events, Int32(events.count), 0)
            if ready <= 0 { continue }
            for event in events.prefix(Int(ready)) {
                let index = Int(event.data.u32)
                while true {
                    let count: Int32 = vectors.withUnsafeMutableBufferPointer { vectorPointer in
                        headers.withUnsafeMutableBufferPointer { headerPointer in
                            for slot in 0..<32 {
                                vectorPointer[slot] = iovec(iov_base: receiveBuffers + slot * 2048, iov_len: 2048)
                                headerPointer[slot] = CNIOLinux_mmsghdr()
                                headerPointer[slot].msg_hdr.msg_iov = vectorPointer.baseAddress! + slot
                                headerPointer[slot].msg_hdr.msg_iovlen = 1
                            }
                            return CNIOLinux_recvmmsg(members[index].descriptor, headerPointer.baseAddress, 32, Int32(MSG_DONTWAIT), nil)
                        }
                    }
                    guard count > 0 else { break }
                    let arrival = monotonicNanoseconds()
                    for slot in 0..<Int(count) {
                        let base = receiveBuffers + slot * 2048
                        let length = Int(headers[slot].msg_len)
                        guard length >= 12 + 16, base.load(as: UInt8.self) >> 6 == 2 else {
                            // Control or RTCP (rosters, receiver reports): ack reliable control.
                            if length >= 8, base.load(as: UInt8.self) == ControlMessage.magic, base.load(fromByteOffset: 3, as: UInt8.self) & 1 != 0 {
                                let sequence = UInt32(bigEndian: base.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
                                send(try! ControlMessage(body: .ack(.init(sequence: sequence))).serialized(), from: members[index].descriptor)
                            }
                            continue
                        }
                        let payloadType = base.load(fromByteOffset: 1, as: UInt8.self) & 0x7F
                        guard payloadType == RTPHeader.opusPayloadType else { continue }
                        let sentAt = Int64(bitPattern: UInt64(bigEndian: base.loadUnaligned(fromByteOffset: 12, as: UInt64.self)))
                        let flag = base.load(fromByteOffset: 20, as: UInt8.self)
                        guard flag == 1 else { continue }  // sent outside the window
                        let sourceRoom = Int(UInt32(bigEndian: base.loadUnaligned(fromByteOffset: 8, as: UInt32.self)) - 1) / 100
                        if sourceRoom != members[index].room { duplicatesOrStrays += 1; continue }
                        received += 1
                        latencies.append(Int64(arrival) - sentAt)
                    }
                }
            }
        }
        let cpu = cpuAtEnd - cpuAtStart
        let expected = members.reduce(0) { $0 + $1.sentInWindow * (membersPerRoom - 1) }
        if received > expected { duplicatesOrStrays += received - expected }
        latencies.sort()
        func quantile(_ q: Double) -> Double {
            guard !latencies.isEmpty else { return .nan }
            return Double(latencies[min(latencies.count - 1, Int(Double(latencies.count) * q))]) / 1000
        }
        return TrialResult(
            rooms: roomsCount, members: membersPerRoom,
            offeredPacketsPerSecond: Double(sentTotal) / seconds,
            forwardedPacketsPerSecond: Double(min(received, expected)) / seconds,
            expectedPacketsPerSecond: Double(expected) / seconds,
            loss: expected == 0 ? 0 : max(0, Double(expected - min(received, expected)) / Double(expected)),
            duplicates: duplicatesOrStrays,
            latencyP50Microseconds: quantile(0.5), latencyP99Microseconds: quantile(0.99), latencyP999Microseconds: quantile(0.999),
            forwarderCPUPercent: cpu / seconds * 100)
    }

    /// RTP header, then send time (8 bytes), then a flag saying whether it counts.
    private func fill(_ packet: inout [UInt8], member: Member, inWindow: Bool) {
        packet.withUnsafeMutableBytes { raw in
            raw[0] = 0x80
            raw[1] = RTPHeader.opusPayloadType
            raw.storeBytes(of: member.sequence.bigEndian, toByteOffset: 2, as: UInt16.self)
            raw.storeBytes(of: (UInt32(member.sequence) &* 960).bigEndian, toByteOffset: 4, as: UInt32.self)
            raw.storeBytes(of: member.ssrc.bigEndian, toByteOffset: 8, as: UInt32.self)
            raw.storeBytes(of: monotonicNanoseconds().bigEndian, toByteOffset: 12, as: UInt64.self)
            raw[20] = inWindow ? 1 : 0
        }
    }
}

// MARK: System helpers

func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

func monotonic() -> Double { Double(monotonicNanoseconds()) / 1e9 }

func pin(cpu: Int) {
    var set = cpu_set_t()
    withUnsafeMutableBytes(of: &set) { raw in
        raw.initializeMemory(as: UInt8.self, repeating: 0)
        raw[cpu / 8] |= 1 << (cpu % 8)
    }
    _ = CNIOLinux_pthread_setaffinity_np(pthread_self(), MemoryLayout<cpu_set_t>.size, &set)
}

/// The kernel's id of the calling thread, from /proc/thread-self (a link to PID/task/TID).
func currentThreadID() -> pid_t {
    var buffer = [CChar](repeating: 0, count: 256)
    let count = readlink("/proc/thread-self", &buffer, buffer.count - 1)
    guard count > 0 else { return 0 }
    let text = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return pid_t(text.split(separator: "/").last.flatMap { Int32($0) } ?? 0)
}

func raiseFileLimit() {
    var limit = rlimit()
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    limit.rlim_cur = limit.rlim_max
    setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
}

func loopbackAddress(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = port.bigEndian
    return address
}

/// Binds to 127.0.0.1 on an ephemeral port; returns the port.
func bindLoopback(_ descriptor: Int32) -> UInt16 {
    var address = loopbackAddress(port: 0)
    _ = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
    }
    return UInt16(bigEndian: address.sin_port)
}

func freeUDPPort() -> UInt16 {
    let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
    defer { close(descriptor) }
    return bindLoopback(descriptor)
}

/// utime + stime of a /proc stat file, in seconds.
func processCPUSeconds(path: String) -> Double {
    guard let file = fopen(path, "r") else { return 0 }
    defer { fclose(file) }
    var buffer = [CChar](repeating: 0, count: 1024)
    guard fgets(&buffer, 1024, file) != nil else { return 0 }
    let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    // Fields after the command name, which is in parentheses and may contain spaces.
    guard let close = text.lastIndex(of: ")") else { return 0 }
    let fields = text[text.index(after: close)...].split(separator: " ")
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}
