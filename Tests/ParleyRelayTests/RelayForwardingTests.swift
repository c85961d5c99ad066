import NIOCore
@testable import ParleyRelay
import ParleyRelayTestSupport
import ParleyWire
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Acceptance 1 and 4: what each member of a room hears through a relay on 127.0.0.1,
/// with one event loop and with two (members then spread over both sockets).
extension RelayOverUDP {
    @Suite("Forwarding through the relay")
    struct RelayForwardingTests {
        static let packetsPerMember = 25

        @Test("each member receives every other member's packets exactly once and none of its own",
              arguments: [(2, 1), (5, 1), (10, 1), (2, 2), (5, 2), (10, 2)])
        func forwardingMatrix(members: Int, threads: Int) throws {
            let fixture = try RelayFixture.start(threads: threads)
            defer { fixture.relay.shutdown() }
            let clients = try fixture.room("matrix", size: members)
            if threads == 2 && members >= 5 {
                let loops = Set(clients.compactMap { fixture.relay.loopIndex(of: $0.address) })
                print("members of a \(members)-member room on loops \(loops.sorted())")
            }
            for sequence in 0..<Self.packetsPerMember {
                for client in clients { client.sendRTP(sequence: UInt16(sequence)) }
            }
            let expectedEach = (members - 1) * Self.packetsPerMember
            for client in clients {
                client.pump(timeout: 5) { $0.mediaInbox.count >= expectedEach }
                client.drain(quiet: 0.1)
            }
            for client in clients {
                var seen: [String: Int] = [:]
                for datagram in client.mediaInbox {
                    let source = try #require(origin(ofMedia: datagram))
                    seen["\(source.ssrc)/\(source.sequence)", default: 0] += 1
                    #expect(source.ssrc != client.ssrc, "a member received its own packet back")
                    // The relay never touches a packet: header, extension and payload arrive as sent.
                    let sender = try #require(clients.first { $0.ssrc == source.ssrc })
                    #expect(datagram == sender.rtp(sequence: source.sequence), "a forwarded packet was changed")
                }
                let expected = Set(clients.filter { $0 !== client }.flatMap { other in
                    (0..<Self.packetsPerMember).map { "\(other.ssrc)/\($0)" }
                })
                #expect(Set(seen.keys) == expected, "missing \(expected.subtracting(seen.keys).count), unexpected \(Set(seen.keys).subtracting(expected).count)")
                #expect(seen.values.allSatisfy { $0 == 1 }, "duplicates: \(seen.filter { $0.value > 1 }.count)")
            }
            print("\(members) members, \(threads) loop(s): each received \(expectedEach) packets, exactly once")
        }

        @Test func eachPacketArrivesPromptly() throws {
            // What a listener notices is delay. Over loopback through a debug build on a loaded
            // CI machine the relay should still add far less than one 20 ms audio frame.
            let bound = 0.05
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let members = try fixture.room("prompt", size: 2)
            var delays: [Double] = []
            for sequence in 0..<50 {
                let sent = now()
                members[0].sendRTP(sequence: UInt16(sequence))
                guard members[1].pump(timeout: 1, until: { $0.mediaInbox.count > sequence }) else { break }
                delays.append(now() - sent)
                usleep(20_000)
            }
            delays.sort()
            #expect(delays.count == 50, "\(50 - delays.count) packets never arrived")
            let median = delays[delays.count / 2], worst = delays.last ?? .infinity
            print("one-way delay through the relay: median \(Int(median * 1_000_000)) µs, worst \(Int(worst * 1_000_000)) µs of 50 (bound \(Int(bound * 1000)) ms)")
            #expect(worst < bound)
        }

        @Test func twoEventLoopsSpreadOneRoomOverBothSockets() throws {
            let fixture = try RelayFixture.start(threads: 2)
            defer { fixture.relay.shutdown() }
            // Ports are random, so which socket a client lands on is too; add members until
            // both loops hold one, then check forwarding across the two.
            var clients: [TestClient] = []
            var loops: Set<Int> = []
            while loops.count < 2 && clients.count < 40 {
                let client = try fixture.member("spread-\(clients.count)", room: "spread")
                clients.append(client)
                if let loop = fixture.relay.loopIndex(of: client.address) { loops.insert(loop) }
            }
            #expect(loops == [0, 1], "members landed on loops \(loops)")
            let first = clients.first!, last = clients.last!
            let everyone = Set(clients.indices.map { "spread-\($0)" })
            #expect(first.waitForRoster(everyone) && last.waitForRoster(everyone))
            for sequence in 0..<10 { first.sendRTP(sequence: UInt16(sequence)); last.sendRTP(sequence: UInt16(sequence)) }
            #expect(last.pump(timeout: 3) { $0.mediaInbox.count >= 10 })
            #expect(first.pump(timeout: 3) { $0.mediaInbox.count >= 10 })
            #expect(Set(last.mediaInbox.compactMap { origin(ofMedia: $0)?.ssrc }) == [first.ssrc])
            #expect(Set(first.mediaInbox.compactMap { origin(ofMedia: $0)?.ssrc }) == [last.ssrc])
        }

        @Test func aPacketOverTheSizeLimitIsDroppedAndTheStreamCarriesOn() throws {
            // The loop reads into slots of max-packet-size bytes: a longer datagram arrives cut
            // short, and must be dropped as oversize, not forwarded truncated.
            let fixture = try RelayFixture.start { $0.limits.maximumPacketSize = 600 }
            defer { fixture.relay.shutdown() }
            let members = try fixture.room("sizes", size: 2)
            members[0].sendRTP(sequence: 1, payloadSize: 900)
            members[0].sendRTP(sequence: 2, payloadSize: 500)
            #expect(members[1].pump(timeout: 3) { !$0.mediaInbox.isEmpty })
            members[1].drain()
            let heard = members[1].mediaInbox.compactMap { origin(ofMedia: $0)?.sequence }
            #expect(heard == [2], "heard sequences \(heard)")
            #expect(members[1].mediaInbox.first?.count == 12 + 500)
            #expect(metricValue(try fixture.relay.metricsText(), #"parley_relay_packets_dropped_total{reason="oversize"}"#) == 1)
        }

        @Test func aDualStackRelayForwardsBetweenIPv4ClientsSeenAsMappedIPv6() throws {
            // Listening on [::] (a VPS with IPv6), IPv4 clients arrive as ::ffff:a.b.c.d: the
            // loop's raw addresses must key, answer and forward to those like any other.
            let fixture = try RelayFixture.start { $0.listen = HostAndPort(host: "::", port: 0) }
            defer { fixture.relay.shutdown() }
            let members = try fixture.room("both-stacks", size: 3)
            for sequence in 0..<5 {
                for member in members { member.sendRTP(sequence: UInt16(sequence)) }
            }
            for (index, member) in members.enumerated() {
                #expect(member.pump(timeout: 3) { $0.mediaInbox.count >= 10 })
                let heard = Set(member.mediaInbox.compactMap { origin(ofMedia: $0)?.ssrc })
                let others = Set(members.indices.filter { $0 != index }.map { members[$0].ssrc })
                #expect(heard == others)
            }
        }

        @Test func twoRoomsStayIsolated() throws {
            let fixture = try RelayFixture.start(threads: 2)
            defer { fixture.relay.shutdown() }
            let red = try fixture.room("red", size: 3)
            let blue = try (0..<3).map { try fixture.member("member-\($0)", room: "blue") }
            for client in blue { #expect(client.waitForRoster(["member-0", "member-1", "member-2"])) }
            for sequence in 0..<20 {
                for client in red + blue { client.sendRTP(sequence: UInt16(sequence)) }
            }
            for client in red + blue { client.pump(timeout: 3) { $0.mediaInbox.count >= 40 }; client.drain(quiet: 0.1) }
            let redSSRCs = Set(red.map(\.ssrc)), blueSSRCs = Set(blue.map(\.ssrc))
            for client in red {
                let heard = Set(client.mediaInbox.compactMap { origin(ofMedia: $0)?.ssrc })
                #expect(heard == redSSRCs.subtracting([client.ssrc]), "red member heard \(heard.intersection(blueSSRCs).count) blue members")
                #expect(client.mediaInbox.count == 40)
            }
            for client in blue {
                let heard = Set(client.mediaInbox.compactMap { origin(ofMedia: $0)?.ssrc })
                #expect(heard == blueSSRCs.subtracting([client.ssrc]))
                #expect(client.mediaInbox.count == 40)
            }
        }

        @Test func spoofedSourceAddressIsDroppedAndCounted() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let members = try fixture.room("spoof", size: 2)
            // A stranger's socket sends packets carrying a member's SSRC: the address decides.
            let stranger = TestClient(relayPort: fixture.port)
            stranger.ssrc = members[0].ssrc
            for sequence in 0..<20 { stranger.sendRTP(sequence: UInt16(sequence)) }
            members[1].pump(timeout: 0.5)
            #expect(members[1].mediaInbox.isEmpty, "\(members[1].mediaInbox.count) spoofed packets were forwarded")
            let metrics = try fixture.relay.metricsText()
            #expect(metricValue(metrics, #"parley_relay_packets_dropped_total{reason="not_joined"}"#) == 20)
            // The stranger learns it is not a member, in a reply no larger than what it sent.
            stranger.drain()
            #expect(stranger.errors.first?.code == .notJoined)
        }

        @Test func packetsWithAnSSRCTheSenderDoesNotOwnAreDropped() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let members = try fixture.room("foreign", size: 3)
            for sequence in 0..<10 {
                members[0].send(members[0].rtp(sequence: UInt16(sequence), ssrc: members[1].ssrc))
            }
            members[0].sendRTP(sequence: 99)  // its own SSRC still goes through
            #expect(members[2].pump(timeout: 2) { !$0.mediaInbox.isEmpty })
            members[2].drain(quiet: 0.2)
            #expect(members[2].mediaInbox.count == 1)
            #expect(origin(ofMedia: members[2].mediaInbox[0])?.sequence == 99)
            let metrics = try fixture.relay.metricsText()
            #expect(metricValue(metrics, #"parley_relay_packets_dropped_total{reason="foreign_ssrc"}"#) == 10)
        }

        @Test func listenOnlyMemberHearsButIsNotForwarded() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let talker = try fixture.member("talker", room: "lecture")
            let listener = try fixture.member("listener", room: "lecture", canPublish: false)
            #expect(talker.waitForRoster(["talker", "listener"]))
            for sequence in 0..<5 { talker.sendRTP(sequence: UInt16(sequence)); listener.sendRTP(sequence: UInt16(sequence)) }
            #expect(listener.pump(timeout: 2) { $0.mediaInbox.count >= 5 })
            talker.drain(quiet: 0.2)
            #expect(talker.mediaInbox.isEmpty)
            #expect(metricValue(try fixture.relay.metricsText(), #"parley_relay_packets_dropped_total{reason="publish_not_allowed"}"#) == 5)
        }

        @Test func membersThatHaveNotSentReadyGetNoMediaAndTheirMediaIsDropped() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let active = try fixture.member("active", room: "r")
            let joining = TestClient(relayPort: fixture.port)
            guard case .joined = joining.join(room: "r", token: fixture.token(room: "r", identity: "joining"), ssrc: 77) else {
                Issue.record("join failed"); return
            }
            for sequence in 0..<5 { active.sendRTP(sequence: UInt16(sequence)); joining.sendRTP(sequence: UInt16(sequence)) }
            joining.pump(timeout: 0.5)
            active.drain(quiet: 0.2)
            #expect(joining.mediaInbox.isEmpty && active.mediaInbox.isEmpty)
            #expect(metricValue(try fixture.relay.metricsText(), #"parley_relay_packets_dropped_total{reason="not_active"}"#) == 5)
        }

        @Test func senderReportsGoDownstreamUnchangedAndTheRelayReportsReceptionToTheSender() throws {
            let fixture = try RelayFixture.start()
            defer { fixture.relay.shutdown() }
            let members = try fixture.room("rtcp", size: 2)
            let (sender, receiver) = (members[0], members[1])
            // 50 packets with every 5th missing: the relay sees 20 % loss on this leg.
            for sequence in 0..<50 where sequence % 5 != 4 { sender.sendRTP(sequence: UInt16(sequence)) }
            let report = RTCPSenderReport(ssrc: sender.ssrc, ntpTimestamp: NTPTimestamp(rawValue: 0x1234_5678_9ABC_DEF0),
                                          rtpTimestamp: 42, packetCount: 40, octetCount: 3200)
            let srBytes = try RTCPCompoundPacket.serialized([.senderReport(report)])
            sender.send(srBytes)
            // The receiver's own RR to the relay is read, not forwarded.
            let rr = try RTCPCompoundPacket.serialized([.receiverReport(RTCPReceiverReport(ssrc: receiver.ssrc, reportBlocks: [
                RTCPReportBlock(ssrc: sender.ssrc, fractionLost: 64, cumulativeLost: 3, extendedHighestSequence: 49, jitter: 480),
            ]))])
            receiver.send(rr)
            #expect(receiver.pump(timeout: 2) { !$0.rtcpInbox.isEmpty && $0.rtcpInbox.contains(srBytes) })
            // The relay's receiver report about the sender's stream arrives within ~1 s.
            let gotReport = sender.pump(timeout: 3) { client in
                client.rtcpInbox.contains { datagram in
                    guard case let .receiverReport(rr)? = try? RTCPCompoundPacket.parse(datagram).first else { return false }
                    return rr.reportBlocks.first?.ssrc == client.ssrc && rr.reportBlocks.first!.cumulativeLost > 0
                }
            }
            #expect(gotReport)
            if let datagram = sender.rtcpInbox.last, case let .receiverReport(rr)? = try? RTCPCompoundPacket.parse(datagram).first, let block = rr.reportBlocks.first {
                print("relay's report to the sender: fraction lost \(block.lossFraction), cumulative \(block.cumulativeLost), jitter \(block.jitter)")
                #expect(block.lossFraction > 0.1 && block.lossFraction < 0.3, "20 % of the packets were never sent")
                // RFC 3550 A.1: the first packet is probation, and sequence 49 was never sent, so
                // the nine gaps 4, 9, …, 44 are what the relay can know was lost.
                #expect(block.cumulativeLost == 9)
            }
            #expect(!sender.rtcpInbox.contains(rr), "a receiver report was forwarded")
            let metrics = try fixture.relay.metricsText()
            #expect(metricValue(metrics, #"parley_relay_downstream_loss_ratio{room="rtcp",identity="member-1"}"#) == 0.25)
        }
    }
}

/// The value of one sample line in a Prometheus exposition.
func metricValue(_ text: String, _ series: String) -> Double? {
    for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
        return Double(line.dropFirst(series.count + 1))
    }
    return nil
}
