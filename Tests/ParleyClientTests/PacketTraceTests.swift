import ParleyBasics
import Foundation
import ParleyWire
import Testing
@testable import ParleyClient

/// `--packet-trace`: what a call sent and received, line by line, read back by the
/// benchmarks; and the packet fates the ideal decoder is given.
@Suite("Packet traces")
struct PacketTraceTests {
    static let sent = PacketTrace.Entry(
        direction: .sent, ssrc: 0xCAFE_BABE, sequenceNumber: 65_535, timestamp: 4_294_967_295,
        nanoseconds: 81_234_567_890_123, size: 31, frameStartSample: 48_000, payloadType: 127, payload: [0x78, 0x00, 0xFF, 0x0A])
    static let received = PacketTrace.Entry(
        direction: .received, ssrc: 7, sequenceNumber: 0, timestamp: 0, nanoseconds: 1, size: 12, payload: [])

    @Test func entriesWrittenByTheCallReadBackUnchanged() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("trace-\(UUID().uuidString).csv").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let writer = try PacketTraceWriter(path: path)
        let header = RTPHeader(marker: true, payloadType: 111, sequenceNumber: 17, timestamp: 960_000, ssrc: 42,
                               headerExtension: .elements([AudioLevel(voiceActivity: true, level: 30).element]))
        let packet = try header.serialized(payload: [1, 2, 3, 0xAB])
        try packet.withUnsafeBytes { bytes in
            let view = try RTPPacketView(parsing: bytes)
            writer.record(.sent, view, nanoseconds: 5_000, frameStartSample: 1_920)
            writer.record(.received, view, nanoseconds: 6_000)
        }
        try writer.close()

        let entries = try PacketTrace.read(contentsOf: path)
        #expect(entries == [
            PacketTrace.Entry(direction: .sent, ssrc: 42, sequenceNumber: 17, timestamp: 960_000, nanoseconds: 5_000,
                              size: packet.count, frameStartSample: 1_920, payload: [1, 2, 3, 0xAB]),
            PacketTrace.Entry(direction: .received, ssrc: 42, sequenceNumber: 17, timestamp: 960_000, nanoseconds: 6_000,
                              size: packet.count, payload: [1, 2, 3, 0xAB]),
        ])
    }

    @Test func extremeValuesSurviveTheRoundTrip() throws {
        let text = [PacketTrace.header, PacketTrace.line(Self.sent), PacketTrace.line(Self.received), ""].joined(separator: "\n")
        #expect(try PacketTrace.parse(text) == [Self.sent, Self.received])
    }

    @Test func aFileThatIsNotATraceIsRefusedWithWhatIsWrongAndWhere() {
        #expect(throws: PacketTrace.ReadError.self) { try PacketTrace.parse("hello\n") }
        do {
            _ = try PacketTrace.parse(PacketTrace.header + "\nsent,1,2,3,4,5,,111,zz\n", path: "t.csv")
            Issue.record("a payload of 'zz' was accepted")
        } catch {
            #expect(error.description == "t.csv, line 2: payload is not an even number of hex digits")
        }
        do {
            _ = try PacketTrace.parse(PacketTrace.header + "\nreceived,1,70000,3,4,5,,111,\n")
            Issue.record("a sequence number of 70000 was accepted")
        } catch {
            #expect(error.line == 2)
            #expect(error.reason.contains("sequence"))
        }
    }

    /// Any bytes give entries or a `ReadError`, never a trap: random text, every truncation
    /// of a valid line, and valid lines with characters replaced.
    @Test func anyTextIsReadOrRefusedWithoutATrap() throws {
        var random = SplitMix64(seed: 0x7472_6163_6500)
        let valid = PacketTrace.line(Self.sent)
        let alphabet = Array("0123456789abcdefxyz,-+ \n\t\u{00}é".unicodeScalars)
        var inputs: [String] = []
        for length in 0...valid.count { inputs.append(String(valid.prefix(length))) }
        for _ in 0..<3_000 {
            let count = Int.random(in: 0...120, using: &random)
            inputs.append(String(String.UnicodeScalarView((0..<count).map { _ in alphabet.randomElement(using: &random)! })))
        }
        for _ in 0..<3_000 {
            var scalars = Array(valid.unicodeScalars)
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                scalars[Int.random(in: 0..<scalars.count, using: &random)] = alphabet.randomElement(using: &random)!
            }
            inputs.append(String(String.UnicodeScalarView(scalars)))
        }
        var accepted = 0
        for input in inputs {
            if let entry = try? PacketTrace.parse(line: Substring(input)) {
                accepted += 1
                #expect(try PacketTrace.parse(line: Substring(PacketTrace.line(entry))) == entry, "input \(input.debugDescription)")
            }
            _ = try? PacketTrace.parse(PacketTrace.header + "\n" + input)
        }
        #expect(accepted > 0)
    }

    // MARK: Fates

    /// Frames 0–9 of a talker: 2 and 3 were DTX silence (never sent), 5 and 7 were lost, 8
    /// arrived twice, 9 arrived late (it is in the trace all the same).
    static func traces() -> (sender: [PacketTrace.Entry], receiver: [PacketTrace.Entry]) {
        let frames = [0, 1, 4, 5, 6, 7, 8, 9]
        let sender = frames.enumerated().map { sequence, frame in
            PacketTrace.Entry(direction: .sent, ssrc: 5, sequenceNumber: UInt16(sequence), timestamp: 1_000 &+ UInt32(frame * 960),
                              nanoseconds: UInt64(frame) * 20_000_000, size: 40, frameStartSample: frame * 960, payload: [1])
        }
        var receiver = sender.filter { ![5, 7].contains($0.frameStartSample! / 960) }.map { entry in
            var entry = entry
            entry.direction = .received
            entry.frameStartSample = nil
            return entry
        }
        receiver.append(receiver[receiver.count - 2])
        // Another member's packet with a timestamp the talker also used is not the talker's.
        receiver.append(PacketTrace.Entry(direction: .received, ssrc: 6, sequenceNumber: 0, timestamp: 1_000 &+ 5 * 960,
                                          nanoseconds: 1, size: 40, payload: [1]))
        return (sender, receiver)
    }

    @Test func aSentFrameIsLostOnlyWhenTheListenerNeverGotItsTimestamp() {
        let (sender, receiver) = Self.traces()
        let fates = PacketFates(senderTrace: sender, receiverTrace: receiver, frameSamples: 960, frames: 12)
        #expect(fates.arrived == [true, true, true, true, true, false, true, false, true, true, true, true])
        #expect(fates.sentFrames == 8)
        #expect(fates.payloads.map { $0 != nil } == [true, true, false, false, true, true, true, true, true, true, false, false])
        #expect(fates.lostFrames == 2)
        #expect(fates.longestLossRun == 1)
    }

    /// A talker sending RED: each packet carries copies of the frames 1 and 3 back. Frames 3
    /// and 4 were lost; the packets of frames 5 and 6 arrived with copies of them (and of 2,
    /// 4, 5, which arrived anyway). Frame 7 was lost with the packets that would repeat it.
    @Test func aLostFrameWhoseCopyCameInALaterPacketHasThatCopy() throws {
        var sender: [PacketTrace.Entry] = []
        for frame in 0..<8 {
            let own: [UInt8] = [0x48, UInt8(frame)]  // a SILK 20 ms TOC and the frame's number
            let redundant = [3, 1].filter { frame - $0 >= 0 }.map {
                OwnedREDPayload.Block(payloadType: 111, timestampOffset: UInt16($0 * 960), data: [0x48, UInt8(frame - $0)])
            }
            let payload = redundant.isEmpty ? own : try OwnedREDPayload(redundant: redundant, primary: .init(payloadType: 111, timestampOffset: 0, data: own)).serialized()
            sender.append(PacketTrace.Entry(
                direction: .sent, ssrc: 9, sequenceNumber: UInt16(frame), timestamp: UInt32(frame * 960), nanoseconds: 0, size: 60,
                frameStartSample: frame * 960, payloadType: redundant.isEmpty ? 111 : 63, payload: payload))
        }
        // Round-trip the trace's text, as the benchmark reads it from a file.
        let text = ([PacketTrace.header] + sender.map(PacketTrace.line)).joined(separator: "\n")
        let read = try PacketTrace.parse(text)
        let receiver = read.filter { ![3, 4, 7].contains(Int($0.sequenceNumber)) }.map { entry in
            var entry = entry
            entry.direction = .received
            return entry
        }
        let fates = PacketFates(senderTrace: read, receiverTrace: receiver, frameSamples: 960, frames: 8)
        #expect(fates.arrived == [true, true, true, false, false, true, true, false])
        #expect(fates.payloads.map { $0?[1] } == (0..<8).map { UInt8($0) }, "each frame's own Opus, unwrapped from RED")
        #expect(fates.copies.map { $0?[1] } == [nil, nil, nil, 3, 4, nil, nil, nil])
        // What the talker sent: every packet's RTP payload, and how many carried copies.
        #expect(fates.sentPackets == 8 && fates.redundantPackets == 7)
        #expect(fates.payloadBytes == read.reduce(0) { $0 + $1.payload.count })
        #expect(abs(fates.payloadKilobitsPerSecond - Double(fates.payloadBytes * 8) / (8 * 0.020) / 1_000) < 1e-9)
    }

    @Test func framesBeyondTheRecordingAreIgnored() {
        let (sender, receiver) = Self.traces()
        let fates = PacketFates(senderTrace: sender, receiverTrace: receiver, frameSamples: 960, frames: 6)
        #expect(fates.arrived == [true, true, true, true, true, false])
        #expect(fates.sentFrames == 4)
    }
}
