import ParleyBasics
import Foundation
import ParleyAudio
@testable import ParleyClient
import ParleyClientTestSupport
import ParleyWire
import Testing

/// Acceptance: nothing a joined peer sends can crash a client. The whole receive path
/// (``CallReceiver`` behind a real session) is fed what a relay or a member could send —
/// RTP with any sequence, timestamp and payload, RTCP with any figures, any control message,
/// anything sealed or not — as well-formed traffic, then truncated and bit-flipped, while
/// time passes and the playback mix pulls audio. The libFuzzer target in `Fuzz/` runs the
/// same scripts guided by coverage.
@Suite("The client's receive path under hostile input")
struct ReceivePathPropertyTests {
    /// Real Opus frames (a tone, 20 ms each), so the jitter buffer decodes what it is given.
    static let opusFrames: [[UInt8]] = {
        let encoder = try! OpusEncoder(OpusEncoder.Configuration())
        return (0..<8).map { index -> [UInt8] in
            let tone: [Float] = (0..<960).map { sample in
                let phase = Double(index * 960 + sample) * 2 * Double.pi * 440 / 48_000
                return Float(0.3 * sin(phase))
            }
            return try! encoder.encode(tone)
        }
    }()

    /// The crash: a publishing member jumps its sequence by 20,000 (RFC 3550 A.1
    /// takes it for a restart and counts afresh), and the next delay sample trapped. The
    /// listener must go on hearing the member after the jump.
    @Test func aMemberThatJumpsItsSequenceBy20000IsStillHeard() throws {
        let peer = try JoinedPeer()
        var script = ScriptWriter()
        var talk = ScriptWriter()
        for index in 0..<150 {
            talk.rtp(ssrc: 0, sequenceStep: index == 0 ? 1_000 : 1, timestampStep: 960, payload: Self.opusFrames[index % 8])
            talk.wait(milliseconds: 20)
        }
        talk.bytes.withUnsafeBytes { peer.run(script: $0) }
        let heardBefore = peer.heardEnergy
        #expect(heardBefore > 0, "the member is heard before the jump")

        var jump = ScriptWriter()
        jump.rtp(ssrc: 0, sequenceStep: 20_000, timestampStep: 960, payload: Self.opusFrames[0])
        for index in 0..<150 {
            jump.rtp(ssrc: 0, sequenceStep: 1, timestampStep: 960, payload: Self.opusFrames[index % 8])
            jump.wait(milliseconds: 20)
        }
        jump.bytes.withUnsafeBytes { peer.run(script: $0) }
        #expect(peer.receiver.link.phase == .active)
        let heardAfter = peer.heardEnergy - heardBefore
        #expect(heardAfter > heardBefore / 2, "and heard as well after it (energy \(heardAfter) against \(heardBefore) before)")
    }

    /// The other route to the same trap: steps of −1 and −2, and gaps of 2,999.
    @Test func heavyReorderingAndGapsJustUnderTheDropoutLimitAreSurvived() throws {
        let peer = try JoinedPeer()
        var script = ScriptWriter()
        let steps: [UInt16] = [1, 1, 0xFFFF, 0xFFFE, 3, 2_999, 1, 0xFFFF, 2, 2_999]
        for index in 0..<600 {
            script.rtp(ssrc: 0, sequenceStep: steps[index % steps.count], timestampStep: 960, payload: Self.opusFrames[index % 8])
            if index % 5 == 0 { script.wait(milliseconds: 40) }
        }
        script.bytes.withUnsafeBytes { peer.run(script: $0) }
        #expect(peer.receiver.link.phase == .active)
    }

    @Test func tenThousandRandomTruncatedAndBitFlippedScriptsFromAJoinedPeerAreSurvived() throws {
        var random = SplitMix64(seed: 0x5EED_0014)
        var scripts = 0
        // A fresh session every 25 scripts; in between the state carries over, as it does in a call.
        while scripts < 10_000 {
            let peer = try JoinedPeer()
            for _ in 0..<25 {
                var script = ScriptWriter()
                for _ in 0..<Int.random(in: 1...12, using: &random) { script.randomStep(&random, frames: Self.opusFrames) }
                var bytes = script.bytes
                switch scripts % 3 {
                case 1 where !bytes.isEmpty:
                    bytes = Array(bytes.prefix(Int.random(in: 0..<bytes.count, using: &random)))
                case 2 where !bytes.isEmpty:
                    for _ in 0...Int.random(in: 0...8, using: &random) {
                        bytes[Int.random(in: 0..<bytes.count, using: &random)] ^= 1 << UInt8.random(in: 0...7, using: &random)
                    }
                default:
                    break
                }
                bytes.withUnsafeBytes { peer.run(script: $0) }
                scripts += 1
            }
        }
        #expect(scripts >= 10_000)
    }
}

/// Writes the steps of a ``JoinedPeer/run(script:)`` script.
struct ScriptWriter {
    private(set) var bytes: [UInt8] = []

    mutating func raw(_ datagram: [UInt8]) { step(0, datagram) }

    mutating func sealed(_ plaintext: [UInt8]) { step(1, plaintext) }

    mutating func wait(milliseconds: Int) {
        var left = milliseconds
        while left > 0 {
            let chunk = min(left, 1_020)
            bytes += [2, UInt8(chunk / 4)]
            left -= chunk
        }
    }

    /// SSRC choice 0 is the member the roster names; 1 is our own SSRC; 2 a stranger's; 3 one per choice byte.
    mutating func rtp(ssrc choice: UInt8, sequenceStep: UInt16, timestampStep: UInt32, payload: [UInt8]) {
        bytes += [3, choice]
        bytes += withUnsafeBytes(of: sequenceStep.bigEndian, Array.init)
        bytes += withUnsafeBytes(of: timestampStep.bigEndian, Array.init)
        bytes += [UInt8(min(payload.count, 255))] + payload.prefix(255)
    }

    private mutating func step(_ operation: UInt8, _ data: [UInt8]) {
        let count = UInt16(min(data.count, 1_599))
        bytes += [operation] + withUnsafeBytes(of: count.bigEndian, Array.init) + data.prefix(Int(count))
    }

    /// One step of what a relay or a member could send, well-formed more often than not.
    mutating func randomStep(_ random: inout SplitMix64, frames: [[UInt8]]) {
        func any<T>(_ values: [T]) -> T { values[Int.random(in: 0..<values.count, using: &random)] }
        func junk(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) } }
        let ssrcs: [UInt32] = [JoinedPeer.peerSSRC, JoinedPeer.ownSSRC, 0xC0C0_C0C0, UInt32.random(in: 0...UInt32.max, using: &random)]
        switch Int.random(in: 0..<10, using: &random) {
        case 0...3:
            let step: UInt16 = any([1, 1, 1, 1, 0, 0xFFFF, 0xFFFE, 2, 2_999, 3_000, 3_001, 20_000, 0x8000, UInt16.random(in: 0...0xFFFF, using: &random)])
            let timestamp: UInt32 = any([960, 960, 960, 0, 1_920, 480, 0xFFFF_FC40, 0x8000_0000, UInt32.random(in: 0...UInt32.max, using: &random)])
            let payload = any([any(frames), any(frames), [0x08], [], [any(frames)[0]] + junk(Int.random(in: 0...200, using: &random)), junk(Int.random(in: 0...255, using: &random))])
            // Mostly the member the roster names; now and then our own SSRC, a stranger, or one of many.
            let ssrc: UInt8 = any([0, 0, 0, 0, 1, 2, 3, UInt8.random(in: 0...255, using: &random)])
            rtp(ssrc: ssrc, sequenceStep: step, timestampStep: timestamp, payload: payload)
        case 4:
            // Short, mostly: each millisecond here is audio the playback mix pulls in a debug build.
            wait(milliseconds: any([10, 20, 20, 20, 60, 1_100]))
        case 5, 6:
            let block = RTCPReportBlock(
                ssrc: any(ssrcs), fractionLost: UInt8.random(in: 0...255, using: &random),
                cumulativeLost: Int32.random(in: -0x80_0000...0x7F_FFFF, using: &random),
                extendedHighestSequence: UInt32.random(in: 0...UInt32.max, using: &random), jitter: UInt32.random(in: 0...UInt32.max, using: &random),
                lastSenderReport: UInt32.random(in: 0...UInt32.max, using: &random), delaySinceLastSenderReport: UInt32.random(in: 0...UInt32.max, using: &random))
            let packets: [RTCPPacket] = any([
                [.receiverReport(RTCPReceiverReport(ssrc: any(ssrcs), reportBlocks: [block, block]))],
                [.senderReport(RTCPSenderReport(ssrc: any(ssrcs), ntpTimestamp: NTPTimestamp(rawValue: UInt64.random(in: 0...UInt64.max, using: &random)),
                                                rtpTimestamp: UInt32.random(in: 0...UInt32.max, using: &random), packetCount: 7, octetCount: 9, reportBlocks: [block])),
                 .sourceDescription(RTCPSourceDescription(chunks: [.init(source: any(ssrcs), items: [.cname("x"), .init(type: 2, value: junk(30))])]))],
                [.goodbye(RTCPGoodbye(sources: [any(ssrcs)], reason: "bye")), .genericNACK(RTCPGenericNACK(senderSSRC: any(ssrcs), mediaSSRC: any(ssrcs), lost: [1, 2, 3]))],
            ])
            if let bytes = try? RTCPCompoundPacket.serialized(packets) { sealed(bytes) }
        case 7, 8:
            let members = (0..<any([0, 1, 2, 70])).map { index in
                ControlMessage.Roster.Member(ssrc: any(ssrcs), identity: any(["peer", "fuzz", "x\(index)", "\u{202E}evil"]), canPublish: Bool.random(using: &random))
            }
            let bodies: [ControlMessage.Body] = [
                .roster(.init(version: UInt32.random(in: 0...UInt32.max, using: &random), members: Array(members.prefix(60)))),
                .ping(.init(timestamp: UInt64.random(in: 0...UInt64.max, using: &random))),
                .pong(.init(timestamp: UInt64.random(in: 0...UInt64.max, using: &random))),
                .ack(.init(sequence: UInt32.random(in: 0...UInt32.max, using: &random))),
                .goodbye(.init(reason: any(ControlMessage.GoodbyeReason.allCases), message: "bye")),
                .error(.init(code: any(ControlMessage.ErrorCode.allCases), message: "no", echo: junk(16))),
                .joined(.init(cookie: 1, ssrc: any(ssrcs), identity: "x", room: "y", canPublish: true,
                              keepaliveIntervalMilliseconds: UInt32.random(in: 0...UInt32.max, using: &random), idleTimeoutMilliseconds: 0)),
            ]
            if let bytes = try? ControlMessage(sequence: UInt32.random(in: 0...UInt32.max, using: &random), isReliable: Bool.random(using: &random),
                                               body: any(bodies)).serialized() {
                if Int.random(in: 0..<4, using: &random) == 0 { raw(bytes) } else { sealed(bytes) }
            }
        default:
            let first: UInt8 = any([0x80, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, UInt8.random(in: 0...255, using: &random)])
            let datagram = [first] + junk(Int.random(in: 0...120, using: &random))
            if Bool.random(using: &random) { raw(datagram) } else { sealed(datagram) }
        }
    }
}
