import ParleyAudio
import ParleyClient
import ParleyWire

/// Decodes what arrived of a stream offline, knowing every packet's fate and with no
/// deadline: the most a receiver could make of it. For each frame slot, in order:
///
/// 1. the frame's own packet;
/// 2. a redundant copy of it from a later packet (RED), unless `onlyFECFromNext`;
/// 3. in-band FEC from the next frame's packet, or (unless `onlyFECFromNext`) from a
///    redundant copy of that packet, which carries the same FEC, when it was encoded with FEC;
/// 4. otherwise concealment (Opus PLC), as for the slots DTX left silent.
///
/// `wait` bounds how many packets after a frame a copy or FEC may come from: a receiver
/// that holds its playout that long.
struct PerfectKnowledgeDecoder {
    struct Decoded {
        var audio: [Float]
        var fromOwnPacket = 0
        var fromRedundancy = 0
        var fromFEC = 0
        var concealed = 0
    }

    let sent: SentStream
    let onlyFECFromNext: Bool
    let wait: Int

    init(sent: SentStream, onlyFECFromNext: Bool, wait: Int) {
        self.sent = sent
        self.onlyFECFromNext = onlyFECFromNext
        self.wait = wait
    }

    func decode() throws -> Decoded {
        // What reached the listener of each packet's frame: its own payload, and copies
        // from later packets (with how many packets later they came), as the client unwraps them.
        var index: [UInt16: Int] = [:]
        for (position, packet) in sent.packets.enumerated() { index[packet.sequenceNumber] = position }
        var own = [[UInt8]?](repeating: nil, count: sent.packets.count)
        var copies = [[(payload: [UInt8], lateness: Int)]](repeating: [], count: sent.packets.count)
        for (position, packet) in sent.packets.enumerated() where !packet.lost {
            _ = try RTPPacketView.withParsed(packet.bytes) { view in
                IncomingFrames.forEach(in: view) { frame in
                    guard let target = index[frame.sequenceNumber], target <= position else { return }
                    if frame.isRedundant {
                        copies[target].append((Array(frame.payload), position - target))
                    } else {
                        own[target] = Array(frame.payload)
                    }
                }
            }
        }
        var bySlot = [Int?](repeating: nil, count: sent.slots)
        for (position, packet) in sent.packets.enumerated() { bySlot[packet.slot] = position }

        let decoder = try OpusDecoder()
        let frame = sent.frameSamples
        var result = Decoded(audio: [Float](repeating: 0, count: sent.slots * frame))
        try result.audio.withUnsafeMutableBufferPointer { audio in
            for slot in 0..<sent.slots {
                let output = UnsafeMutableBufferPointer(rebasing: audio[slot * frame..<(slot + 1) * frame])
                guard let position = bySlot[slot] else {
                    _ = try decoder.conceal(samples: frame, into: output)  // DTX silence
                    continue
                }
                if let payload = own[position] {
                    _ = try payload.withUnsafeBytes { try decoder.decode($0, into: output) }
                    result.fromOwnPacket += 1
                    continue
                }
                if !onlyFECFromNext, let copy = copies[position].first(where: { $0.lateness <= wait }) {
                    _ = try copy.payload.withUnsafeBytes { try decoder.decode($0, into: output) }
                    result.fromRedundancy += 1
                    continue
                }
                let next = position + 1
                if next < sent.packets.count, sent.packets[next].slot == slot + 1, sent.packets[next].carriesFEC, wait >= 1 {
                    let carrier = own[next] ?? (onlyFECFromNext ? nil : copies[next].first {
                        $0.lateness + 1 <= wait && !sent.packets[next + $0.lateness].reencodesRedundancy
                    }?.payload)
                    if let carrier {
                        _ = try carrier.withUnsafeBytes { try decoder.decodeFEC(from: $0, samples: frame, into: output) }
                        result.fromFEC += 1
                        continue
                    }
                }
                _ = try decoder.conceal(samples: frame, into: output)
                result.concealed += 1
            }
        }
        return result
    }
}
