import Foundation
@testable import ParleyRelay
import ParleyRelayTestSupport
import ParleySecurity
import ParleyWire
import Testing

/// Issue 14's attacks by members holding valid tokens, and by forgers of the relay's
/// address, on the members of a room, over real UDP with the client's own link.
extension RelayOverUDP {
    @Suite("Members and forgers cannot end or steer another member's session")
    struct MemberAttackTests {
        func join(_ fixture: RelayFixture, _ identity: String, room: String = "standup", ssrc: UInt32 = UInt32.random(in: 1...UInt32.max)) throws -> SecureMember {
            let member = SecureMember(relayPort: fixture.port, room: room, token: fixture.token(room: room, identity: identity),
                                      relayKey: fixture.relayKey!.publicKey, ssrc: ssrc)
            guard member.pump(timeout: 5, until: { $0.isActive }) else { throw TestFailure("\(identity) did not join: \(member.link.phase)") }
            return member
        }

        /// Finding 6: ada's session times out at the relay (her network went away); mallory
        /// joins with ada's SSRC; ada's client rejoins, is told `ssrcInUse`, takes a new SSRC
        /// and carries on: bob hears her again.
        @Test func aMemberWhoseSSRCWasTakenWhileAwayRejoinsUnderANewOne() throws {
            let fixture = try RelayFixture.startSecure {
                $0.limits.idleTimeoutMilliseconds = 1_000
                $0.limits.keepaliveIntervalMilliseconds = 400
            }
            defer { fixture.relay.shutdown() }
            let ada = try join(fixture, "ada")
            let bob = try join(fixture, "bob")
            let taken = ada.ssrc
            // Ada is cut off: the relay times her out after a second.
            usleep(1_600_000)
            bob.pump(timeout: 0.5)
            let mallory = try join(fixture, "mallory", ssrc: taken)
            // Ada's link notices the silence, rejoins, and meets mallory on her SSRC.
            let rejoined = ada.pump(timeout: 10) { member in
                member.events.filter { if case .joined = $0 { true } else { false } }.count >= 2 || member.joinedOrFailed() && !member.isActive
            }
            #expect(rejoined && ada.isActive, "ada's link: \(ada.link.phase), events \(ada.events)")
            #expect(ada.link.ssrc != taken, "she joined under a new SSRC")
            bob.pump(timeout: 1)
            for _ in 0..<5 { ada.sendMedia() }
            bob.pump(timeout: 1) { $0.received(from: ada.link.ssrc).count >= 5 }
            print("ada rejoined as \(ada.link.ssrc) (mallory holds \(taken)); bob heard \(bob.received(from: ada.link.ssrc).count) packets from her")
            #expect(bob.received(from: ada.link.ssrc).count >= 5)
            mallory.pump(timeout: 0.1)
        }

        /// Finding 7: a member's compound RTCP with report blocks about everyone, and BYE, SDES
        /// and NACK naming their SSRCs. The others receive its sender report's own figures and
        /// nothing else; what they hear about their own streams comes from the relay.
        @Test func forgedRTCPFromAMemberReachesTheOthersOnlyAsItsOwnSenderReport() throws {
            let fixture = try RelayFixture.startSecure()
            defer { fixture.relay.shutdown() }
            let victims = [try join(fixture, "ada"), try join(fixture, "bob")]
            let mallory = try join(fixture, "mallory")
            for member in victims + [mallory] { member.pump(timeout: 1) { $0.link.roster.count == 3 } }
            let targets = victims.map(\.ssrc)
            let blocks = targets.map { RTCPReportBlock(ssrc: $0, fractionLost: 255, cumulativeLost: 0x7F_FFFF, extendedHighestSequence: 1, jitter: 99) }
            let forged: [RTCPPacket] = [
                .senderReport(RTCPSenderReport(ssrc: mallory.ssrc, ntpTimestamp: NTPTimestamp(rawValue: 5), rtpTimestamp: 960,
                                               packetCount: 1, octetCount: 80, reportBlocks: blocks)),
                .sourceDescription(RTCPSourceDescription(chunks: [.init(source: mallory.ssrc, items: [.cname("mallory")])]
                    + targets.map { .init(source: $0, items: [.cname("forged")]) })),
                .goodbye(RTCPGoodbye(sources: targets, reason: "forged")),
            ] + targets.map { .genericNACK(RTCPGenericNACK(senderSSRC: mallory.ssrc, mediaSSRC: $0, lost: [1, 2])) }
            let bytes = try RTCPCompoundPacket.serialized(forged)
            for victim in victims { victim.media.removeAll() }
            for _ in 0..<3 {
                mallory.send(bytes)
                usleep(500_000)
                mallory.pump(timeout: 0.01)
            }
            for victim in victims {
                victim.pump(timeout: 0.5)
                let received = victim.media.filter { $0.withUnsafeBytes { PacketKind($0) } == .rtcp }.compactMap { try? RTCPCompoundPacket.parse($0) }
                let fromMallory = received.filter { packets in packets.contains { if case let .senderReport(report) = $0 { report.ssrc == mallory.ssrc } else { false } } }
                print("\(victim.link.roster.first { $0.ssrc == victim.ssrc }?.identity ?? "?") received \(received.count) RTCP packets, \(fromMallory.count) of them mallory's sender report: \(received.map { $0.map(\.kindName) })")
                #expect(fromMallory.count >= 2, "mallory's own sender report still reaches the others")
                for packets in received {
                    for packet in packets {
                        switch packet {
                        case let .senderReport(report):
                            #expect(report.reportBlocks.isEmpty, "no member's report blocks are forwarded")
                        case let .receiverReport(report):
                            #expect(!victims.map(\.ssrc).contains(report.ssrc) && report.ssrc != mallory.ssrc, "only the relay's own reports")
                        case let .sourceDescription(description):
                            #expect(description.chunks.allSatisfy { $0.source == mallory.ssrc }, "no SDES about anyone else")
                        case .goodbye, .genericNACK, .other:
                            Issue.record("\(packet) reached a member")
                        }
                    }
                }
            }
        }

        /// The fraction lost in the relay's receiver reports to `member` since `start`.
        func reportedLoss(to member: SecureMember, since start: Int) -> [UInt8] {
            member.media[start...].filter { $0.withUnsafeBytes { PacketKind($0) } == .rtcp }
                .compactMap { try? RTCPCompoundPacket.parse($0) }.flatMap { $0 }
                .flatMap { packet -> [RTCPReportBlock] in if case let .receiverReport(report) = packet { report.reportBlocks } else { [] } }
                .filter { $0.ssrc == member.link.ssrc }.map(\.fractionLost)
        }

        /// Ada talks for 4 s while `listeners` send receiver reports about her stream every
        /// 300 ms with the fraction lost each names; returns what the relay's reports to her said.
        func lossAdaIsTold(_ fixture: RelayFixture, listeners: [(String, UInt8)]) throws -> [UInt8] {
            let ada = try join(fixture, "ada")
            let others = try listeners.map { (try join(fixture, $0.0), $0.1) }
            for member in [ada] + others.map(\.0) { member.pump(timeout: 1) { $0.link.roster.count == listeners.count + 1 } }
            let start = ada.media.count
            for tick in 0..<200 {
                ada.sendMedia()
                if tick % 15 == 0 {
                    for (listener, fraction) in others {
                        let block = RTCPReportBlock(ssrc: ada.link.ssrc, fractionLost: fraction, cumulativeLost: 0, extendedHighestSequence: 1, jitter: 0)
                        listener.send(try RTCPCompoundPacket.serialized([.receiverReport(RTCPReceiverReport(ssrc: listener.link.ssrc, reportBlocks: [block]))]))
                    }
                }
                ada.pump(timeout: 0.02)
            }
            for (listener, _) in others { listener.pump(timeout: 0.01) }
            return reportedLoss(to: ada, since: start)
        }

        /// What a listener loses of a stream reaches its sender's encoder through the relay's
        /// own report (the median listener's, when worse than the sender's leg): in a
        /// two-person call the one listener's loss is the path's.
        @Test func aListenersLossReachesTheSenderThroughTheRelaysReport() throws {
            let fixture = try RelayFixture.startSecure()
            defer { fixture.relay.shutdown() }
            let told = try lossAdaIsTold(fixture, listeners: [("bob", 64)])
            print("bob reports losing 64/256 of ada's stream; the relay told ada \(told)")
            #expect(told.count >= 2, "the relay reports on ada's stream about once a second")
            #expect(told.dropFirst().allSatisfy { $0 == 64 }, "the path's loss is bob's")
        }

        /// Finding 7, report blocks: mallory claims to lose all of ada's stream while bob, the
        /// other listener, says nothing of loss. One member's word is not the room's: ada's
        /// encoder is told of no loss.
        @Test func oneMemberCannotDriveAnothersEncoderWithForgedLoss() throws {
            let fixture = try RelayFixture.startSecure()
            defer { fixture.relay.shutdown() }
            let told = try lossAdaIsTold(fixture, listeners: [("bob", 0), ("mallory", 255)])
            print("mallory reports losing 255/256 of ada's stream, bob 0; the relay told ada \(told)")
            #expect(told.count >= 2)
            #expect(told.allSatisfy { $0 == 0 })
        }

        /// Finding 9: one member sends 200 full-size packets a second (at 49 receivers, 118
        /// Mbit/s). What the relay forwards of it is held to the member's bitrate.
        @Test func oneMembersMediaIsHeldToItsBitrate() throws {
            let fixture = try RelayFixture.start { $0.limits.maximumMemberBitsPerSecond = 256_000 }
            defer { fixture.relay.shutdown() }
            let members = try fixture.room("standup", size: 2)
            let (loud, listener) = (members[0], members[1])
            let start = now()
            var sequence: UInt16 = 0
            while now() < start + 2 {
                for _ in 0..<2 {
                    loud.sendRTP(sequence: sequence, payloadSize: 1_400)
                    sequence &+= 1
                }
                listener.drain(quiet: 0)
                usleep(10_000)
            }
            listener.drain(quiet: 0.3)
            let bytes = listener.mediaInbox.reduce(0) { $0 + $1.count }
            let bitrate = Double(bytes * 8) / (now() - start)
            let metrics = try fixture.relay.metricsText()
            let shed = metricValue(metrics, #"parley_relay_packets_dropped_total{reason="bitrate_limited"}"#) ?? 0
            print(String(format: "sent %d packets of 1,412 bytes in 2 s (%.0f kbit/s); the listener got %.0f kbit/s; %d shed as bitrate_limited",
                         Int(sequence), Double(Int(sequence) * 1_412 * 8) / 2_000, bitrate / 1_000, Int(shed)))
            #expect(bitrate <= 256_000 * 1.6, "a second's burst plus the rate")
            #expect(shed > 0)
        }

        /// Finding 5, the relay's part: a relay that lost a member's session (it restarted without
        /// a word) answers the member's sealed packets with plaintext "not joined" echoing each
        /// packet's tag, and the member's link rejoins on the second such answer, long before its
        /// five-second silence timeout.
        @Test func aRelayThatLostASessionIsRejoinedOnItsEchoedNotJoined() throws {
            var fixture = try RelayFixture.startSecure { $0.shutdownGraceMilliseconds = 0 }
            let key = fixture.relayKey!
            let ada = try join(fixture, "ada")
            let port = fixture.port
            // The relay goes away and a new one takes the port; ada hears no goodbye.
            fixture.relay.shutdown()
            fixture = try RelayFixture.start(relayKey: key, secret: fixture.secret) { configuration in
                configuration.insecure = false
                configuration.listen = HostAndPort(host: "127.0.0.1", port: port)
            }
            fixture.relayKey = key
            defer { fixture.relay.shutdown() }
            ada.socket.drain(quiet: 0.2)
            let start = now()
            var rejoined = false
            while now() < start + 4, !rejoined {
                ada.sendMedia()
                rejoined = ada.pump(timeout: 0.05) { $0.events.filter { if case .joined = $0 { true } else { false } }.count >= 2 }
            }
            print(String(format: "ada rejoined %.2f s after she began sending to the new relay", now() - start))
            #expect(rejoined)
            #expect(now() - start < 2, "on the relay's echoed answers, not the 5 s silence timeout")
            #expect(ada.events.contains { if case let .reconnecting(reason) = $0 { reason.contains("no longer knows") } else { false } })
        }
    }
}

extension RTCPPacket {
    /// A short name for test output.
    var kindName: String {
        switch self {
        case let .senderReport(report): return "SR(\(report.reportBlocks.count) blocks)"
        case let .receiverReport(report): return "RR(\(report.reportBlocks.count) blocks)"
        case let .sourceDescription(description): return "SDES(\(description.chunks.count) chunks)"
        case .goodbye: return "BYE"
        case .genericNACK: return "NACK"
        case .other: return "other"
        }
    }
}
