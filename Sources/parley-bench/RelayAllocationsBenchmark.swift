import ArgumentParser
import CParleyAllocationCounter
import Crypto
import Logging
import NIOCore
import ParleyBasics
import ParleyRelay
import ParleySecurity
import ParleyWebRTC
import ParleyWire

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// `parley-bench relay-allocations`: how many heap allocations the relay's loop makes per
/// forwarded packet, plaintext and sealed. The relay runs in this process (one loop), so
/// ``CParleyAllocationCounter`` — this executable's malloc, which counts per thread before it
/// calls glibc's — sees every allocation its loop thread makes; ``LoadGenerator``'s members
/// join as clients do and talk at 50 packets/s for the run. Everything the loop does in that
/// time counts — forwarding, sealing, the relay's receiver reports, its ticks and the members'
/// acknowledgements — and is divided by the packets it received. Beside it, the load generator's own thread, which seals and opens every
/// member's packets as a client would.
struct RelayAllocationsBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay-allocations",
        abstract: "Heap allocations per forwarded packet on the relay's loop, plaintext and sealed.",
        discussion: """
          swift build -c release --product parley-bench
          .build/release/parley-bench relay-allocations --json
        """
    )

    @Option(help: "Rooms in the run.")
    var rooms: Int = 20
    @Option(help: "Receivers per packet (members per room minus one).")
    var fanout: Int = 4
    @Option(help: "Seconds of traffic (after 0.5 s of warm-up).")
    var seconds: Double = 5
    @Option(help: "Bytes of RTP payload per packet.")
    var payload: Int = 100
    @Flag(help: "Print the results as JSON on stdout.")
    var json = false

    struct Result: Codable {
        var transport: String
        var rooms: Int
        var fanout: Int
        /// Media packets the relay received from the members, the copies it sent on, and what it dropped.
        var packetsIn: Int
        var copiesOut: Int
        var dropped: Int
        /// Allocations on the relay's loop thread during the run.
        var relayAllocations: UInt64
        var relayAllocationsPerPacket: Double
        /// Allocations on the load generator's thread (its own sealing and bookkeeping), per packet it sent.
        var generatorAllocationsPerPacket: Double

        var line: String {
            String(format: "%@: %d packets in, %d copies out, %d dropped: relay loop %llu allocations, %.4f per packet; load generator %.2f per packet",
                   transport, packetsIn, copiesOut, dropped, relayAllocations, relayAllocationsPerPacket, generatorAllocationsPerPacket)
        }
    }

    func validate() throws {
        guard (1...2_000).contains(rooms) else { throw ValidationError("--rooms takes 1 to 2000") }
        guard (1...50).contains(fanout) else { throw ValidationError("--fanout takes 1 to 50") }
        guard seconds > 0, seconds <= 600 else { throw ValidationError("--seconds takes more than 0 and at most 600") }
    }

    func run() throws {
        raiseFileLimit()
        parley_allocations_start()
        var results: [Result] = []
        for encrypted in [false, true] {
            let relay = try InProcessRelay(encrypted: encrypted)
            defer { relay.stop() }
            let generator = try LoadGenerator(rooms: rooms, members: fanout + 1, payload: payload, forwarder: relay)
            // Joins, rosters and their acknowledgements settle before counting starts.
            usleep(500_000)
            let loop = try relay.loopThread()
            let relayBefore = parley_allocations_of_thread(loop)
            let generatorBefore = parley_allocations_of_current_thread()
            // What the members received is the load generator's concern; the relay's own counts say what it forwarded.
            _ = try generator.run(seconds: seconds, forwarder: relay)
            let relayAllocations = parley_allocations_of_thread(loop) &- relayBefore
            let generatorAllocations = parley_allocations_of_current_thread() &- generatorBefore
            let counts = try relay.counts()
            let packetsIn = counts.received
            let result = Result(
                transport: encrypted ? "sealed" : "plaintext", rooms: rooms, fanout: fanout, packetsIn: packetsIn,
                copiesOut: counts.mediaSent, dropped: counts.dropped, relayAllocations: relayAllocations,
                relayAllocationsPerPacket: Double(relayAllocations) / Double(max(packetsIn, 1)),
                generatorAllocationsPerPacket: Double(generatorAllocations) / Double(max(packetsIn, 1)))
            log(result.line)
            results.append(result)
        }
        for line in try Self.browserCopyLines() { log(line) }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(results), as: UTF8.self))
        }
    }
}

extension RelayAllocationsBenchmark {
    /// The steps a browser leg adds to sealing each copy that no member or trunk runs
    /// (`BrowserCopyMaker`): the header parsed once, renumbered for the browser, the slot's MID
    /// written in, its RED completed with the frame two packets back (the slots and the frames
    /// under their locks), here on this thread for 4 voices' RED packets as `parley` senders
    /// make them, for a browser with Parley's own numbers (Chromium's) and for one with others.
    /// SRTP is not in this count.
    static func browserCopyLines() throws -> [String] {
        let packets = 20_000
        var templates: [[UInt8]] = []
        for voice in 0..<4 {
            let copies = [OwnedREDPayload.Block(payloadType: RTPHeader.opusPayloadType, timestampOffset: 2_880, data: [UInt8](repeating: 1, count: 80)),
                          OwnedREDPayload.Block(payloadType: RTPHeader.opusPayloadType, timestampOffset: 960, data: [UInt8](repeating: 2, count: 80))]
            let payload = try OwnedREDPayload(
                redundant: copies, primary: .init(payloadType: RTPHeader.opusPayloadType, timestampOffset: 0, data: [UInt8](repeating: 3, count: 80))).serialized()
            templates.append(try RTPHeader(payloadType: RTPHeader.redPayloadType, sequenceNumber: 0, timestamp: 0, ssrc: UInt32(voice + 1),
                                           headerExtension: .elements([AudioLevel(voiceActivity: true, level: 30).element]))
                .serialized(payload: payload))
        }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 2_048, alignment: 16)
        defer { buffer.deallocate() }
        var lines: [String] = []
        for (numbers, opus, red, level) in [("Parley's payload types", RTPHeader.opusPayloadType, RTPHeader.redPayloadType, AudioLevel.extensionID),
                                            ("renumbered", UInt8(109), UInt8(120), UInt8(3))] {
            let copies = BrowserCopyMaker(offer: try browserOffer(opus: opus, red: red, audioLevelID: level), allowRED: true)
            var grown = 0
            var refused = 0
            let before = parley_allocations_of_current_thread()
            for index in 0..<packets {
                let voice = index % 4
                let sequence = UInt16(truncatingIfNeeded: index / 4)
                let count = templates[voice].withUnsafeBytes { template in
                    buffer.copyMemory(from: template)
                    return template.count
                }
                buffer.storeBytes(of: sequence.bigEndian, toByteOffset: 2, as: UInt16.self)
                buffer.storeBytes(of: (UInt32(sequence) &* 960).bigEndian, toByteOffset: 4, as: UInt32.self)
                guard let made = copies.make(in: buffer, count: count, nowNanoseconds: UInt64(index)) else {
                    refused += 1
                    continue
                }
                // The MID grows a copy by at most 40 bytes; the frame two back adds 84.
                if made > count + RTPMidStamp.maximumGrowth { grown += 1 }
            }
            let allocations = parley_allocations_of_current_thread() &- before
            // A count of a path that did not run would say nothing.
            guard refused == 0, grown > 0 else { throw ValidationError("browser copies, \(numbers): \(refused) refused and \(grown) completed") }
            lines.append(String(format: "browser copies, %@: %d packets, %d refused, %d completed with the frame two back, %llu allocations, %.4f per packet",
                                numbers, packets, refused, grown, allocations, Double(allocations) / Double(packets)))
        }
        return lines
    }

    /// A browser's offer as Chromium makes it (its microphone on mid 0, receiving too; a
    /// receiving section per voice), with the payload types and audio level id given.
    static func browserOffer(opus: UInt8, red: UInt8, audioLevelID: UInt8) throws -> WebRTCOffer {
        func section(_ mid: String, _ direction: String) -> String {
            "m=audio 9 UDP/TLS/RTP/SAVPF \(opus) \(red)\r\n"
                + "a=ice-ufrag:brws\r\na=ice-pwd:browserpasswordbrowserpassword\r\n"
                + "a=fingerprint:sha-256 DA:A6:59:CD:47:0B:29:5A:D1:0C:A0:67:E3:B4:B5:26:7F:50:C5:4B:BC:11:81:D9:C0:2C:C3:FF:E7:7C:EC:A7\r\n"
                + "a=setup:actpass\r\na=mid:\(mid)\r\n"
                + "a=extmap:\(audioLevelID) urn:ietf:params:rtp-hdrext:ssrc-audio-level\r\na=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r\n"
                + "a=\(direction)\r\na=rtcp-mux\r\na=rtpmap:\(opus) opus/48000/2\r\na=rtpmap:\(red) red/48000/2\r\na=fmtp:\(red) \(opus)/\(opus)\r\na=ssrc:1111 cname:x\r\n"
        }
        let text = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 a b c d\r\n"
            + section("0", "sendrecv") + ["a", "b", "c", "d"].map { section($0, "recvonly") }.joined()
        return try WebRTCOffer(SessionDescription(parsing: text))
    }
}

/// `parley-relay` in this process, one loop, so a benchmark can look at its thread.
final class InProcessRelay: ForwarderUnderTest {
    let relay: Relay
    let port: UInt16
    let secret = TokenSecret.random()
    let relayKey: RelayKey?

    init(encrypted: Bool) throws {
        var configuration = RelayConfiguration()
        configuration.listen = HostAndPort(host: "127.0.0.1", port: 0)
        configuration.threads = 1
        configuration.insecure = !encrypted
        configuration.limits.maximumRooms = 10_000
        var logger = Logger(label: "parley-bench-relay")
        logger.logLevel = .error
        relayKey = encrypted ? RelayKey() : nil
        relay = try Relay.start(configuration: configuration, secret: secret, relayKey: relayKey, logger: logger)
        guard let port = relay.localAddress.port else { throw ValidationError("the relay bound no port") }
        self.port = UInt16(port)
    }

    var entry: MemberEntry {
        .join(security: relayKey.map { .secure(relayKey: $0.publicKey) } ?? .insecure, token: hourLongTokens(signedWith: secret))
    }

    /// The kernel thread ID of the relay's loop (named `relay-loop-0`).
    func loopThread() throws -> Int32 {
        var tids = [Int32](repeating: 0, count: 1024)
        let count = Int(parley_allocations_threads(&tids, Int32(tids.count)))
        for tid in tids[..<count] {
            let name = (try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8)) ?? ""
            if name.hasPrefix("relay-loop") { return tid }
        }
        throw ValidationError("the relay's loop thread made no allocation at all since counting began (not even when it started)")
    }

    func cpuSeconds() -> Double { processCPUSeconds(path: "/proc/self/stat") }

    /// What the relay's own metrics say it did: media (and, sealed, the few RTCP and control
    /// packets inside the same kind) received, media copies sent, packets dropped.
    func counts() throws -> (received: Int, mediaSent: Int, dropped: Int) {
        var received = 0, mediaSent = 0, dropped = 0
        for line in try relay.metricsText().split(separator: "\n") where !line.hasPrefix("#") {
            guard let value = line.split(separator: " ").last.flatMap({ Double($0) }) else { continue }
            if line.hasPrefix("parley_relay_packets_sent_total{kind=\"media\"}") { mediaSent = Int(value) }
            if line.hasPrefix("parley_relay_packets_dropped_total") { dropped += Int(value) }
            if line.hasPrefix("parley_relay_packets_received_total{kind=\"rtp\"}") || line.hasPrefix("parley_relay_packets_received_total{kind=\"sealed\"}") {
                received += Int(value)
            }
        }
        return (received, mediaSent, dropped)
    }

    func stop() { relay.shutdown() }
}
