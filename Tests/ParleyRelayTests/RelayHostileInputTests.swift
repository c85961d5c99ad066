import ParleyBasics
import ParleyRelay
import ParleyRelayTestSupport
import ParleyWire
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Acceptance 2: hostile bytes and overload. The relay stays up, the room that talks
/// through it hears every packet, memory stays bounded, and /metrics counts what was shed.
extension RelayOverUDP {
    @Suite("Hostile input and overload")
    struct RelayHostileInputTests {
        static let hostilePackets = 100_000
        /// What the relay may grow by while it drops 100,000 hostile packets: its tables are
        /// bounded (sessions need a valid token; stranger rate limits live in a fixed table),
        /// so growth is allocator noise. Measured in the whole test process.
        static let memoryGrowthBoundBytes = 16 << 20

        @Test func hundredThousandHostilePacketsDoNotDisturbATalkingRoom() throws {
            let fixture = try RelayFixture.start(threads: 2)
            defer { fixture.relay.shutdown() }
            let talkers = try fixture.room("talk", size: 5)
            // Joined attackers in another room: their garbage comes from member addresses.
            let joinedAttackers = try (0..<3).map { try fixture.member("attacker-\($0)", room: "attackers") }
            let strangers = (0..<16).map { _ in TestClient(relayPort: fixture.port, receiveBuffer: 64 << 10) }
            let seeds = try Self.validPackets(ssrc: joinedAttackers[0].ssrc, token: fixture.token(room: "talk", identity: "mallory"))

            var rng = SeededGenerator(seed: 0xBAD_F00D)
            var talkSequence: UInt16 = 0
            var nextTalk = now()
            let warmUp = now() + 0.5
            var rssBefore = 0
            var sent = 0
            while sent < Self.hostilePackets || now() < warmUp {
                if now() >= nextTalk {
                    // Every 20 ms each talker sends its next packet, as Opus would.
                    for talker in talkers { talker.sendRTP(sequence: talkSequence) }
                    talkSequence += 1
                    nextTalk += 0.02
                    if rssBefore == 0 && now() >= warmUp { rssBefore = residentBytes() }
                    for talker in talkers { talker.drain(quiet: 0) }
                }
                guard now() >= warmUp else { usleep(1000); continue }
                // A burst of hostile packets, then a pause, so a debug build keeps up: this tests
                // what the bytes do, and overload has its own test below.
                for _ in 0..<40 where sent < Self.hostilePackets {
                    let bytes = Self.hostile(&rng, seeds: seeds)
                    if Bool.random(using: &rng) {
                        strangers.randomElement(using: &rng)!.send(bytes)
                    } else {
                        joinedAttackers.randomElement(using: &rng)!.send(bytes)
                    }
                    sent += 1
                }
                usleep(1000)
            }
            let hostileSeconds = now() - warmUp
            // Talk one more second after the flood.
            let end = now() + 1
            while now() < end {
                if now() >= nextTalk {
                    for talker in talkers { talker.sendRTP(sequence: talkSequence) }
                    talkSequence += 1
                    nextTalk += 0.02
                }
                for talker in talkers { talker.drain(quiet: 0) }
                usleep(2000)
            }
            for talker in talkers { talker.drain(quiet: 0.2) }
            let rssAfter = residentBytes()

            // Every member heard every other member's every packet, exactly once.
            let expected = Int(talkSequence)
            var worstLoss = 0
            for talker in talkers {
                for other in talkers where other !== talker {
                    let heard = talker.mediaInbox.compactMap(origin(ofMedia:)).filter { $0.ssrc == other.ssrc }.map(\.sequence)
                    #expect(heard.count == Set(heard).count, "duplicates")
                    worstLoss = max(worstLoss, expected - Set(heard).count)
                }
            }
            // What an operator sees: /metrics over HTTP.
            let metrics = try fixture.relay.metricsText()
            let dropped = metricSum(metrics, "parley_relay_packets_dropped_total")
            print("""
                \(sent) hostile packets in \(rounded(hostileSeconds)) s while 5 members talked \(expected) packets each; \
                worst loss between two talkers: \(worstLoss) packets; relay dropped \(Int(dropped)) packets by reason: \
                \(metricLines(metrics, "parley_relay_packets_dropped_total").joined(separator: ", ")); \
                process memory grew \((rssAfter - rssBefore) >> 10) KiB (bound \(Self.memoryGrowthBoundBytes >> 20) MiB)
                """)
            #expect(worstLoss == 0)
            #expect(rssAfter - rssBefore < Self.memoryGrowthBoundBytes)
            // Most hostile packets are dropped and counted (some are valid-looking control the
            // relay answers or ignores, and some RTP from the attackers' own SSRC is forwarded).
            #expect(dropped >= Double(Self.hostilePackets) * 0.5)
            // Still serving: a new member can join and hear the room.
            let late = try fixture.member("late", room: "talk")
            talkers[0].sendRTP(sequence: talkSequence)
            #expect(late.pump(timeout: 2) { !$0.mediaInbox.isEmpty })
        }

        @Test func afterOverloadEveryStreamForwardsAgainWithinASecond() throws {
            let fixture = try RelayFixture.start(threads: 1) {
                // The overload is the socket's, not one member's rate: lift the per-member limit.
                $0.limits.packetsPerSecondPerMember = 100_000
                $0.limits.packetBurstPerMember = 100_000
                $0.limits.maximumMemberBitsPerSecond = 1_000_000_000
                $0.socketBufferBytes = 256 << 10
            }
            defer { fixture.relay.shutdown() }
            let members = try fixture.room("busy", size: 4)
            for member in members { member.autoAck = false }
            let receivedBefore = metricValue(try fixture.relay.metricsText(), #"parley_relay_packets_received_total{kind="rtp"}"#) ?? 0

            // 1. Five seconds as fast as four senders can go.
            var offered = 0
            var sequence: UInt16 = 0
            let blastEnd = now() + 5
            while now() < blastEnd {
                for _ in 0..<64 {
                    for member in members { member.sendRTP(sequence: sequence) }
                    sequence = sequence &+ 1
                    offered += members.count
                }
            }
            let accepted = (metricValue(try fixture.relay.metricsText(), #"parley_relay_packets_received_total{kind="rtp"}"#) ?? 0) - receivedBefore
            let overloadFactor = Double(offered) / max(accepted, 1)
            print("overload: offered \(offered / 5) packets/s for 5 s; the relay took in \(Int(accepted) / 5)/s (\(rounded(overloadFactor))× its rate)")
            #expect(overloadFactor >= 2, "the test did not reach twice what the relay sustains")
            // What the kernel shed at the full socket shows in /metrics too.
            let kernelDrops = metricValue(try fixture.relay.metricsText(), "parley_relay_socket_receive_drops") ?? 0
            print("the kernel dropped \(Int(kernelDrops)) datagrams at the relay's full socket; /metrics shows them")
            #expect(kernelDrops > 0)

            // 2. Back to a normal rate (50 packets/s per talker, far below half the relay's rate).
            let recoveryStart = now()
            let firstCalm: UInt16 = 50_000
            var calm = firstCalm
            var calmSentAt: [UInt16: Double] = [:]
            while now() - recoveryStart < 2.5 {
                calmSentAt[calm] = now()
                for member in members { member.sendRTP(sequence: calm) }
                calm += 1
                let next = recoveryStart + Double(calm - firstCalm) * 0.02
                while now() < next { for member in members { member.drain(quiet: 0) } }
            }
            for member in members { member.drain(quiet: 0.3) }

            // Every stream, at every receiver: each packet sent 1 s or more after the load fell arrived.
            var latestRecovery = 0.0
            for receiver in members {
                let heard = receiver.mediaInbox.compactMap(origin(ofMedia:)).filter { $0.sequence >= firstCalm }
                for sender in members where sender !== receiver {
                    let sequences = Set(heard.filter { $0.ssrc == sender.ssrc }.map(\.sequence))
                    let missingLate = (firstCalm..<calm).filter { calmSentAt[$0]! - recoveryStart >= 1.0 && !sequences.contains($0) }
                    #expect(missingLate.isEmpty, "a stream lost \(missingLate.count) packets more than 1 s after the overload ended")
                    // When did this stream start arriving without gaps?
                    let firstOfTail = (firstCalm..<calm).reversed().first { !sequences.contains($0) }.map { $0 + 1 } ?? firstCalm
                    latestRecovery = max(latestRecovery, (calmSentAt[firstOfTail] ?? 0) - recoveryStart)
                }
            }
            print("every stream forwarded without loss from \(Int(latestRecovery * 1000)) ms after the overload ended (bound 1000 ms)")
            #expect(latestRecovery <= 1.0)
        }

        // MARK: Hostile bytes

        static func validPackets(ssrc: UInt32, token: String) throws -> [[UInt8]] {
            [
                try RTPHeader(payloadType: 111, sequenceNumber: 7, timestamp: 960, ssrc: ssrc,
                              headerExtension: .elements([AudioLevel(voiceActivity: true, level: 30).element])).serialized(payload: Array(repeating: 1, count: 60)),
                try RTCPCompoundPacket.serialized([.senderReport(RTCPSenderReport(ssrc: ssrc, ntpTimestamp: NTPTimestamp(rawValue: 1), rtpTimestamp: 2, packetCount: 3, octetCount: 4))]),
                try RTCPCompoundPacket.serialized([.receiverReport(RTCPReceiverReport(ssrc: ssrc, reportBlocks: [RTCPReportBlock(ssrc: 1, fractionLost: 1, cumulativeLost: 1, extendedHighestSequence: 1, jitter: 1)]))]),
                try RTCPCompoundPacket.serialized([.genericNACK(RTCPGenericNACK(senderSSRC: ssrc, mediaSSRC: 9, lost: [1, 2, 3]))]),
                try ControlMessage(body: .join(.init(ssrc: ssrc, room: "talk", token: token, software: "x"))).serialized(),
                try ControlMessage(body: .ready(.init(cookie: 1))).serialized(),
                try ControlMessage(body: .ping(.init(timestamp: 1))).serialized(),
                try ControlMessage(body: .ack(.init(sequence: 1))).serialized(),
            ]
        }

        /// Random noise, noise behind a plausible first byte, truncations and bit flips of valid packets.
        static func hostile(_ rng: inout SeededGenerator, seeds: [[UInt8]]) -> [UInt8] {
            switch Int.random(in: 0..<4, using: &rng) {
            case 0:
                return rng.bytes(count: Int.random(in: 0...1600, using: &rng))
            case 1:
                var bytes = rng.bytes(count: Int.random(in: 1...600, using: &rng))
                bytes[0] = [0x80, 0x81, 0x90, 0xA0, 0x50, 0x50, 0xC0][Int.random(in: 0..<7, using: &rng)]
                if bytes[0] == 0x50 && bytes.count > 2 { bytes[1] = 1; bytes[2] = UInt8.random(in: 1...10, using: &rng) }
                return bytes
            case 2:
                let seed = seeds.randomElement(using: &rng)!
                return Array(seed.prefix(Int.random(in: 0..<seed.count, using: &rng)))
            default:
                var bytes = seeds.randomElement(using: &rng)!
                for _ in 0..<Int.random(in: 1...6, using: &rng) {
                    bytes[Int.random(in: 0..<bytes.count, using: &rng)] ^= 1 << UInt8.random(in: 0...7, using: &rng)
                }
                return bytes
            }
        }
    }
}

/// Bytes of memory the process holds (resident set).
func residentBytes() -> Int {
    guard let file = fopen("/proc/self/statm", "r") else { return 0 }
    defer { fclose(file) }
    var size = 0, resident = 0
    withUnsafeMutablePointer(to: &size) { sizePointer in
        withUnsafeMutablePointer(to: &resident) { residentPointer in
            _ = withVaList([sizePointer, residentPointer]) { vfscanf(file, "%ld %ld", $0) }
        }
    }
    return resident * Int(sysconf(Int32(_SC_PAGESIZE)))
}

func metricLines(_ text: String, _ name: String) -> [String] {
    text.split(separator: "\n").filter { $0.hasPrefix(name + "{") || $0.hasPrefix(name + " ") }.map(String.init)
        .filter { !$0.hasSuffix(" 0") }
}

func metricSum(_ text: String, _ name: String) -> Double {
    metricLines(text, name).compactMap { Double($0.split(separator: " ").last ?? "") }.reduce(0, +)
}

/// Seeded, so hostile input is reproducible.
typealias SeededGenerator = SplitMix64

extension SplitMix64 {
    mutating func bytes(count: Int) -> [UInt8] {
        (0..<count).map { _ in UInt8(truncatingIfNeeded: next()) }
    }
}

/// One decimal place, for printed figures.
func rounded(_ value: Double) -> String {
    guard value.isFinite else { return "\(value)" }
    let tenths = Int((value * 10).rounded())
    return "\(tenths / 10).\(abs(tenths % 10))"
}
