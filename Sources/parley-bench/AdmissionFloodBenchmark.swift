import ArgumentParser
import CParleyNet
import Crypto
import ParleyBasics
import ParleyClient
import ParleySecurity
import ParleyWire
import Synchronization

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// `parley-bench admission-flood`: issue 14's two floods against the release relay, each at
/// the rate one core of this load generator can send, while people join the way `parley
/// call` does (the client's own `RelayLink`: hello, cookie, handshake with the join, ready,
/// roster, with its retransmissions). The baseline is the same joins with no flood, in the
/// same run. Reported: the share of joins in within 2 s, their times, and the relay's CPU.
///
/// - cookie-less: handshake inits with forged cookies from 2,000 addresses;
/// - token-less: one host fetches a cookie for each of 400 ports and sends valid Noise inits
///   with fresh ephemeral keys and no join inside (anyone with an invite's relay key can).
struct AdmissionFloodBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admission-flood",
        abstract: "Legitimate joins while strangers flood the relay's handshake.",
        discussion: """
        Build the relay in release first:
          swift build -c release --product parley-relay && swift build -c release --product parley-bench
          .build/release/parley-bench admission-flood --json
        """
    )

    @Option(help: "Seconds of the cookie-less flood (joins run through it).")
    var seconds: Double = 20
    @Option(help: "Seconds of the token-less flood: long enough to fill a replay cache that fills (a minute at 2,000 a second).")
    var tokenlessSeconds: Double = 70
    @Option(help: "Seconds between two legitimate joins.")
    var joinInterval: Double = 0.25
    @Option(help: "The parley-relay binary (default: beside this one).")
    var relayBinary: String?
    @Option(help: "CPU for the relay.")
    var relayCPU: Int = 1
    @Option(help: "CPU for the flood generator.")
    var loadCPU: Int = 0
    @Option(help: "Nice value of the relay.")
    var nice: Int = 0
    @Option(help: "Scenarios to run, comma-separated: none, cookieless, tokenless.")
    var scenarios: String = "none,cookieless,tokenless"
    @Flag(help: "Print the results as JSON on stdout.")
    var json = false

    static let joinDeadline = 2.0

    func run() throws {
        raiseFileLimit()
        let binary = try relayBinary ?? RelayBenchmark.siblingRelayBinary()
        var results: [AdmissionFloodResult] = []
        for scenario in scenarios.split(separator: ",").map(String.init) {
            guard let kind = AdmissionFloodResult.Flood(rawValue: scenario) else {
                throw ValidationError("--scenarios: '\(scenario)' is not one of none, cookieless, tokenless")
            }
            let relay = try RelayProcess(binary: binary, cpu: relayCPU, nice: nice, encrypted: true, tuning: [], admin: true)
            defer { relay.stop() }
            let duration = kind == .tokenless ? tokenlessSeconds : seconds
            log("\(kind.rawValue): \(Int(duration)) s against \(binary)")
            let result = try measure(kind, relay: relay, seconds: duration)
            log(result.summary)
            results.append(result)
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(results), as: UTF8.self))
        } else {
            for result in results { print(result.summary) }
        }
    }

    private func measure(_ kind: AdmissionFloodResult.Flood, relay: RelayProcess, seconds: Double) throws -> AdmissionFloodResult {
        guard let relayKey = relay.relayKey else { throw ValidationError("the relay did not start encrypted") }
        let flood: FloodGenerator? = switch kind {
        case .none: nil
        case .cookieless: try CookielessInitFlood(relayPort: relay.port, cpu: loadCPU)
        case .tokenless: try TokenlessInitFlood(relayPort: relay.port, relayKey: relayKey, cpu: loadCPU)
        }
        flood?.start()
        // Let the flood reach full rate before the first join.
        usleep(500_000)
        let cpuBefore = relay.cpuSeconds()
        let start = monotonic()
        var joins: [Double] = []
        var index = 0
        while monotonic() < start + seconds {
            let due = start + Double(index) * joinInterval
            if monotonic() < due { usleep(UInt32((due - monotonic()) * 1e6)) }
            joins.append(try joinOnce(relay: relay, relayKey: relayKey, index: index))
            index += 1
        }
        let elapsed = monotonic() - start
        let cpu = (relay.cpuSeconds() - cpuBefore) / elapsed
        let sent = flood?.stop() ?? 0
        let drops = relay.adminPort.flatMap { fetchMetrics(port: $0) }.map(Self.dropCounts) ?? [:]
        return AdmissionFloodResult(flood: kind, seconds: elapsed, floodPerSecond: Double(sent) / (elapsed + 0.5),
                                    relayCPU: cpu, joinSeconds: joins, deadline: Self.joinDeadline, relayDrops: drops)
    }

    /// `parley_relay_packets_dropped_total` by reason, and the kernel's drops at the socket.
    static func dropCounts(_ metrics: String) -> [String: Double] {
        var counts: [String: Double] = [:]
        for line in metrics.split(separator: "\n") {
            if line.hasPrefix("parley_relay_packets_dropped_total{reason=\""),
               let close = line.firstIndex(of: "}"), let value = Double(line[line.index(after: close)...].trimmingCharacters(in: .whitespaces)) {
                let reason = line.dropFirst("parley_relay_packets_dropped_total{reason=\"".count).prefix { $0 != "\"" }
                if value > 0 { counts[String(reason)] = value }
            } else if line.hasPrefix("parley_relay_socket_receive_drops "), let value = Double(line.split(separator: " ").last ?? "") {
                counts["kernel_socket_drops"] = value
            }
        }
        return counts
    }

    /// One person joining, as `parley call` does; the seconds until the roster arrived, or
    /// infinity if that took longer than twice the deadline.
    private func joinOnce(relay: RelayProcess, relayKey: Curve25519.KeyAgreement.PublicKey, index: Int) throws -> Double {
        let room = "room-\(index / 40)"
        let socket = try JoiningSocket(relayPort: relay.port)
        var configuration = RelayLink.Configuration(relayAddress: "127.0.0.1:\(relay.port)", room: room,
                                                    token: relay.token(room, "person-\(index)"), ssrc: UInt32(index + 1),
                                                    security: .secure(relayKey: relayKey))
        configuration.software = "parley-bench"
        var link = RelayLink(configuration: configuration)
        let start = MonotonicClock.now()
        for datagram in link.start(now: start).datagrams { socket.send(datagram) }
        let giveUp = start + UInt64(2 * Self.joinDeadline * 1e9)
        while link.phase != .active, MonotonicClock.now() < giveUp {
            if case .failed = link.phase { break }
            let now = MonotonicClock.now()
            let wait = min(link.nextDeadline ?? giveUp, giveUp)
            if let datagram = socket.receive(timeoutMilliseconds: Int32(max(1, (Int64(wait) - Int64(now)) / 1_000_000))) {
                let output = datagram.withUnsafeBytes { link.handle(datagram: $0, now: MonotonicClock.now()) { _ in } }
                for bytes in output.datagrams { socket.send(bytes) }
            }
            for bytes in link.tick(now: MonotonicClock.now()).datagrams { socket.send(bytes) }
        }
        guard link.phase == .active else { return .infinity }
        let seconds = Double(MonotonicClock.now() - start) / 1e9
        for bytes in link.leave(now: MonotonicClock.now()).datagrams { socket.send(bytes) }
        return seconds
    }
}

// MARK: Results

struct AdmissionFloodResult: Codable {
    enum Flood: String, Codable {
        case none, cookieless, tokenless
    }

    var flood: Flood
    var seconds: Double
    /// Datagrams the generator sent per second.
    var floodPerSecond: Double
    /// The relay's CPU, in cores, while the flood ran.
    var relayCPU: Double
    /// Each join's time to the roster, seconds (infinity: not in within twice the deadline).
    var joinSeconds: [Double]
    var deadline: Double
    /// The relay's drops by reason at the end (its /metrics), and the kernel's at its socket.
    var relayDrops: [String: Double]

    var joinedInTime: Double {
        joinSeconds.isEmpty ? 0 : Double(joinSeconds.filter { $0 <= deadline }.count) / Double(joinSeconds.count)
    }

    func percentile(_ fraction: Double) -> Double {
        let sorted = joinSeconds.sorted()
        guard !sorted.isEmpty else { return .infinity }
        return sorted[min(sorted.count - 1, Int((fraction * Double(sorted.count - 1)).rounded()))]
    }

    var summary: String {
        func time(_ seconds: Double) -> String { seconds.isFinite ? String(format: "%.0f ms", seconds * 1000) : "never" }
        let rate = flood == .none ? "no flood" : String(format: "%@ flood %.0f datagrams/s", flood.rawValue, floodPerSecond)
        let drops = relayDrops.sorted { $0.value > $1.value }.map { "\($0.key) \(Int($0.value))" }.joined(separator: ", ")
        return String(format: "%@: %d joins, %@ in within %.0f s; join p50 %@, p99 %@; relay CPU %.0f %% of a core; dropped: %@",
                      rate, joinSeconds.count, percent(joinedInTime), deadline, time(percentile(0.5)), time(percentile(0.99)), relayCPU * 100,
                      drops.isEmpty ? "nothing" : drops)
    }

    enum CodingKeys: String, CodingKey {
        case flood, seconds, floodPerSecond, relayCPU, joinSeconds, deadline, relayDrops
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(flood, forKey: .flood)
        try container.encode(seconds, forKey: .seconds)
        try container.encode(floodPerSecond, forKey: .floodPerSecond)
        try container.encode(relayCPU, forKey: .relayCPU)
        // JSON has no infinity: a join that never finished is written as -1.
        try container.encode(joinSeconds.map { $0.isFinite ? $0 : -1 }, forKey: .joinSeconds)
        try container.encode(deadline, forKey: .deadline)
        try container.encode(relayDrops, forKey: .relayDrops)
    }
}

// MARK: The floods

/// A flood on a thread of its own, pinned to the load CPU, as fast as it can send.
protocol FloodGenerator: AnyObject {
    func start()
    /// Stops the flood and returns the datagrams sent.
    func stop() -> Int
}

/// Runs `body` on a pinned thread until stopped; `body` returns how many datagrams it sent.
final class FloodThread: @unchecked Sendable {
    // @unchecked: `body` runs only on the flood's thread; the flags are atomics.
    private let body: () -> Int
    private let cpu: Int
    private let running = Atomic<Bool>(false)
    private let sent = Atomic<Int>(0)
    private let finished = Atomic<Bool>(false)

    init(cpu: Int, body: @escaping () -> Int) {
        self.cpu = cpu
        self.body = body
    }

    func start() {
        running.store(true, ordering: .relaxed)
        var handle = pthread_t()
        pthread_create(&handle, nil, { argument in
            let flood = Unmanaged<FloodThread>.fromOpaque(argument!).takeRetainedValue()
            flood.loop()
            return nil
        }, Unmanaged.passRetained(self).toOpaque())
        pthread_detach(handle)
    }

    private func loop() {
        pin(cpu: cpu)
        while running.load(ordering: .relaxed) { sent.wrappingAdd(body(), ordering: .relaxed) }
        finished.store(true, ordering: .relaxed)
    }

    func stop() -> Int {
        running.store(false, ordering: .relaxed)
        while !finished.load(ordering: .relaxed) { usleep(1_000) }
        return sent.load(ordering: .relaxed)
    }
}

/// Handshake inits with forged cookies from 2,000 addresses: what anyone on the internet can
/// send without receiving a byte.
final class CookielessInitFlood: FloodGenerator {
    private let thread: FloodThread

    init(relayPort: UInt16, cpu: Int) throws {
        let socket = try MultiAddressSocket(destination: loopbackAddress(port: relayPort))
        let inits: [[UInt8]] = (0..<256).map { _ in
            var bytes = try! [UInt8](serializedSize: HandshakeInit.headerSize) { (writer: inout ByteWriter) throws(WireError) in
                try HandshakeInit.writeHeader(to: &writer, senderIndex: UInt32.random(in: 1...UInt32.max),
                                              cookie: (0..<16).map { _ in UInt8.random(in: 0...255) })
            }
            bytes += (0..<80).map { _ in UInt8.random(in: 0...255) }
            return bytes
        }
        var next = 0
        thread = FloodThread(cpu: cpu) {
            for _ in 0..<MultiAddressSocket.batch {
                socket.queue(inits[next % inits.count], from: memberAddress(next % 2_000, port: socket.port))
                next &+= 1
            }
            socket.flush()
            return MultiAddressSocket.batch
        }
    }

    func start() { thread.start() }
    func stop() -> Int { thread.stop() }
}

/// One host with 400 ports, each holding a cookie it fetched with a hello, sending valid
/// Noise inits (a fresh ephemeral key each, so none is a replay) with no join inside.
final class TokenlessInitFlood: FloodGenerator {
    private let thread: FloodThread

    init(relayPort: UInt16, relayKey: Curve25519.KeyAgreement.PublicKey, cpu: Int) throws {
        var sockets: [JoiningSocket] = []
        for _ in 0..<400 { sockets.append(try JoiningSocket(relayPort: relayPort, host: "127.77.0.1")) }
        var handshakes = sockets.map { _ in ClientHandshake(relayPublicKey: relayKey) }
        var cookies = [[UInt8]?](repeating: nil, count: sockets.count)
        var cookieTimes = [Double](repeating: 0, count: sockets.count)
        var helloTimes = [Double](repeating: 0, count: sockets.count)
        var next = 0
        thread = FloodThread(cpu: cpu) {
            let port = next % sockets.count
            next &+= 1
            let now = monotonic()
            // A cookie lives 60–120 s: fetch one for a port without, and renew it each minute.
            if cookies[port] == nil || now - cookieTimes[port] > 60 {
                if let reply = sockets[port].receive(timeoutMilliseconds: 0), reply.first == SecureMessageType.cookie.rawValue {
                    cookies[port] = reply
                    cookieTimes[port] = now
                } else if now - helloTimes[port] > 0.5 {
                    handshakes[port] = ClientHandshake(relayPublicKey: relayKey)
                    sockets[port].send(handshakes[port].helloBytes)
                    helloTimes[port] = now
                    return 1
                }
            }
            guard let cookie = cookies[port],
                  let message = try? cookie.withUnsafeBytes({ try handshakes[port].makeInit(cookieReply: $0, payload: []) }) else { return 0 }
            sockets[port].send(message)
            return 1
        }
    }

    func start() { thread.start() }
    func stop() -> Int { thread.stop() }
}

/// A plain UDP socket on a loopback address, talking to the relay.
final class JoiningSocket {
    let descriptor: Int32
    private var relay: sockaddr_in

    init(relayPort: UInt16, host: String = "127.0.0.1") throws {
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard descriptor >= 0 else { throw ValidationError("cannot open a UDP socket: \(String(cString: strerror(errno)))") }
        self.descriptor = descriptor
        var local = loopbackAddress(port: 0)
        local.sin_addr.s_addr = inet_addr(host)
        let bound = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            close(descriptor)
            throw ValidationError("cannot bind a UDP socket to \(host): \(String(cString: strerror(errno)))")
        }
        relay = loopbackAddress(port: relayPort)
    }

    deinit { close(descriptor) }

    func send(_ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { raw in
            withUnsafePointer(to: &relay) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(descriptor, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
    }

    /// One datagram, waiting up to `timeoutMilliseconds` (0: only what is there).
    func receive(timeoutMilliseconds: Int32) -> [UInt8]? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, timeoutMilliseconds) > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 2048)
        let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        return count >= 0 ? Array(buffer[..<count]) : nil
    }
}

/// The relay's `/metrics` text from its admin port, or nil.
func fetchMetrics(port: UInt16) -> String? {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { return nil }
    defer { close(descriptor) }
    var address = loopbackAddress(port: port)
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else { return nil }
    let request = Array("GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8)
    guard request.withUnsafeBytes({ write(descriptor, $0.baseAddress, $0.count) }) == request.count else { return nil }
    var response: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 16_384)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0 else { break }
        response += buffer[..<count]
    }
    return String(decoding: response, as: UTF8.self)
}
