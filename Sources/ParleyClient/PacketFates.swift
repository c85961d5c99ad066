import ParleyAudio

/// Which of a talker's frames a listener got, from the two `--packet-trace`s: a frame is
/// lost when the talker sent a packet for it and the listener's trace has no packet of the
/// talker's SSRC with that RTP timestamp (late and duplicate packets count as got: an
/// ideal receiver has no deadline). A lost frame may still have come as a redundant copy
/// in a later packet that arrived (RED, `copies`).
public struct PacketFates: Sendable {
    /// Per frame of the talker's recording: false when it was sent and never arrived.
    public var arrived: [Bool]
    /// Per frame: the Opus payload the talker sent for it, nil where it sent none (DTX
    /// silence, or before it joined).
    public var payloads: [[UInt8]?]
    /// Per lost frame: a redundant copy of it from a later packet that arrived, if any.
    public var copies: [[UInt8]?]
    /// Frames the talker sent, and those of them the listener never got.
    public var sentFrames: Int
    public var lostFrames: Int
    /// The longest run of consecutive frames lost.
    public var longestLossRun: Int
    /// The RTP payload bytes of the talker's packets, how many packets there were, and how
    /// many carried redundant copies (RED with at least one earlier frame).
    public var payloadBytes: Int
    public var sentPackets: Int
    public var redundantPackets: Int

    /// Payload per packet sent, as kilobits per second of the frame it carries (20 ms for
    /// Parley): the stream's rate while the talker talks.
    public var payloadKilobitsPerSecond: Double {
        sentPackets > 0 ? Double(payloadBytes * 8) / (Double(sentPackets) * frameSeconds) / 1_000 : 0
    }

    private let frameSeconds: Double

    /// - Parameters:
    ///   - frameSamples: samples per frame (960 for Parley's 20 ms).
    ///   - frames: frames in the talker's recording; packets of frames beyond it are ignored.
    public init(senderTrace: [PacketTrace.Entry], receiverTrace: [PacketTrace.Entry], frameSamples: Int, frames: Int) {
        precondition(frameSamples > 0 && frames >= 0)
        frameSeconds = Double(frameSamples) / Double(AudioClock.sampleRate)
        let sent = senderTrace.filter { $0.direction == .sent }
        var bytes = 0
        var packets = 0
        var redundant = 0
        let ssrcs = Set(sent.map(\.ssrc))
        struct Key: Hashable { var ssrc: UInt32; var timestamp: UInt32 }
        let got = Set(receiverTrace.filter { $0.direction == .received && ssrcs.contains($0.ssrc) }.map { Key(ssrc: $0.ssrc, timestamp: $0.timestamp) })
        var lost = Set<Int>()
        var own = [[UInt8]?](repeating: nil, count: frames)
        var carried: [(frame: Int, copy: [UInt8])] = []
        for packet in sent {
            guard let start = packet.frameStartSample, start / frameSamples < frames else { continue }
            let frame = start / frameSamples
            bytes += packet.payload.count
            packets += 1
            var carriesCopies = false
            let delivered = got.contains(Key(ssrc: packet.ssrc, timestamp: packet.timestamp))
            if !delivered { lost.insert(frame) }
            _ = packet.payload.withUnsafeBytes { payload in
                IncomingFrames.forEach(
                    payloadType: packet.payloadType, payload: payload, sequenceNumber: packet.sequenceNumber, timestamp: packet.timestamp
                ) { carriedFrame in
                    guard carriedFrame.isRedundant else {
                        own[frame] = Array(carriedFrame.payload)
                        return
                    }
                    carriesCopies = true
                    let back = Int(packet.timestamp &- carriedFrame.timestamp) / frameSamples
                    if delivered, back > 0, frame - back >= 0 { carried.append((frame - back, Array(carriedFrame.payload))) }
                }
            }
            if carriesCopies { redundant += 1 }
        }
        payloadBytes = bytes
        sentPackets = packets
        redundantPackets = redundant
        payloads = own
        arrived = (0..<frames).map { !lost.contains($0) }
        copies = [[UInt8]?](repeating: nil, count: frames)
        for (frame, copy) in carried where lost.contains(frame) && copies[frame] == nil { copies[frame] = copy }
        self.sentFrames = payloads.reduce(0) { $0 + ($1 == nil ? 0 : 1) }
        lostFrames = lost.count
        var longest = 0
        var run = 0
        for got in arrived {
            run = got ? 0 : run + 1
            longest = max(longest, run)
        }
        longestLossRun = longest
    }
}
