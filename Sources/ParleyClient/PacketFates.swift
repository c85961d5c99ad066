/// Which of a talker's frames a listener got, from the two `--packet-trace`s: a frame is
/// lost when the talker sent a packet for it and the listener's trace has no packet of the
/// talker's SSRC with that RTP timestamp (late and duplicate packets count as got: an
/// ideal receiver has no deadline).
public struct PacketFates: Sendable {
    /// Per frame of the talker's recording: false when it was sent and never arrived.
    public var arrived: [Bool]
    /// Per frame: the payload the talker sent for it, nil where it sent none (DTX silence,
    /// or before it joined).
    public var payloads: [[UInt8]?]
    /// Frames the talker sent, and those of them the listener never got.
    public var sentFrames: Int
    public var lostFrames: Int
    /// The longest run of consecutive frames lost.
    public var longestLossRun: Int

    /// - Parameters:
    ///   - frameSamples: samples per frame (960 for Parley's 20 ms).
    ///   - frames: frames in the talker's recording; packets of frames beyond it are ignored.
    public init(senderTrace: [PacketTrace.Entry], receiverTrace: [PacketTrace.Entry], frameSamples: Int, frames: Int) {
        precondition(frameSamples > 0 && frames >= 0)
        let sent = senderTrace.filter { $0.direction == .sent }
        let ssrcs = Set(sent.map(\.ssrc))
        struct Key: Hashable { var ssrc: UInt32; var timestamp: UInt32 }
        let got = Set(receiverTrace.filter { $0.direction == .received && ssrcs.contains($0.ssrc) }.map { Key(ssrc: $0.ssrc, timestamp: $0.timestamp) })
        var lost = Set<Int>()
        payloads = [[UInt8]?](repeating: nil, count: frames)
        for packet in sent {
            guard let start = packet.frameStartSample, start / frameSamples < frames else { continue }
            let frame = start / frameSamples
            payloads[frame] = packet.payload
            if !got.contains(Key(ssrc: packet.ssrc, timestamp: packet.timestamp)) { lost.insert(frame) }
        }
        arrived = (0..<frames).map { !lost.contains($0) }
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
