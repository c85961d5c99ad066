import ParleyAudio
import ParleyE2EE
import ParleyWire

/// The sender's encode step: one frame of voice in, the RTP payload that carries it out.
///
/// The frame is encoded with Opus at the setting `EncoderAdaptation` decided (bitrate,
/// in-band FEC and its expected loss). When the setting asks for redundancy, the payload
/// is RFC 2198 RED instead: the frames sent `distances` packets earlier again, as exact
/// copies of their Opus packets or as a second, lower-rate encoding, then the current
/// frame. A receiver that lost a burst rebuilds it from the first packet after it; in-band
/// FEC alone reaches one frame back.
///
/// In an end-to-end encrypted room each encoding is sealed (SFrame) as soon as it is made,
/// before it becomes a primary or a copy: the copies are the sealed bytes again, the second
/// encoding is sealed on its own, and in-band FEC is inside the seal of the frame after.
///
/// Only frames sent in consecutive packets with consecutive timestamps are repeated: a
/// silence (DTX) or a frame not sent clears the history, so a receiver derives each block's
/// sequence number from its timestamp offset alone. While there is nothing to repeat (a
/// talkspurt's first packet) the payload is plain Opus.
///
/// Owned by the capture thread (or an offline tool); writes into the caller's buffer and
/// allocates nothing per frame.
public final class VoiceEncoder {
    public enum Output: Equatable {
        /// DTX silence: nothing to send (the packetizer skips the frame).
        case silence
        /// The frame may not leave: the room is end-to-end encrypted and no key is set yet.
        case withheld
        /// `count` bytes of `payloadType` in the caller's buffer.
        case payload(payloadType: UInt8, count: Int)
    }

    /// Redundant blocks one payload carries at most.
    public static let maximumRedundantBlocks = 4
    /// The farthest back a redundant block reaches, in frames.
    public static let maximumDistance = 8
    /// The largest payload `encode` writes: the RED headers, the largest redundant blocks
    /// and the largest Opus packet, sealed.
    public static let maximumPayloadSize = 1 + maximumRedundantBlocks * (4 + REDPayload.maximumBlockLength) + 1_275 * 3 + 7
        + FrameSealer.maximumOverhead

    private let encoder: OpusEncoder
    /// The second, lower-rate encoder, while the setting asks for re-encoded redundancy.
    private var redundantEncoder: OpusEncoder?
    public private(set) var setting: EncoderAdaptation.Setting

    // The last `maximumDistance` frames' redundant form (their own Opus packets, or the
    // second encoding), in one allocation: slot `index` holds `lengths[index]` bytes. One
    // slot more than the distance, for the frame being encoded.
    private let slots: UnsafeMutableRawBufferPointer
    private static let slotSize = 1_275 + FrameSealer.maximumOverhead
    private static let slotCount = maximumDistance + 1
    private var lengths = [Int](repeating: 0, count: slotCount)
    private var newest = 0
    /// How many of the latest frames are in the history, consecutive (reset by a gap).
    private var consecutive = 0
    private let primary: UnsafeMutableRawBufferPointer
    /// Where a frame is sealed before it takes its place (nil without a sealer).
    private let sealed: UnsafeMutableRawBufferPointer?
    private var sealer: FrameSealer?
    private var blocks: [REDPayload.Block] = []
    /// With `--packet-trace` in an end-to-end encrypted room: every payload again as it was
    /// before sealing, for the person's own diagnostics (the trace must replay and decode).
    private let mirror: PlaintextMirror?
    /// The last payload ``encode(_:metadata:into:)`` made, before its frames were sealed, when
    /// the encoder keeps a plaintext mirror and the frame was sealed; nil otherwise.
    public private(set) var lastPlaintextPayload: (payloadType: UInt8, bytes: UnsafeRawBufferPointer)?

    /// - Parameters:
    ///   - sealer: seals every encoding in an end-to-end encrypted room (nil: never).
    ///   - keepsPlaintext: also keep each payload as it was before sealing (`lastPlaintextPayload`).
    public init(encoder: OpusEncoder, setting: EncoderAdaptation.Setting, sealer: FrameSealer? = nil, keepsPlaintext: Bool = false) throws(OpusError) {
        self.encoder = encoder
        self.setting = setting
        self.sealer = sealer
        mirror = sealer != nil && keepsPlaintext ? PlaintextMirror(slotCount: Self.slotCount, slotSize: Self.slotSize) : nil
        slots = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.slotCount * Self.slotSize, alignment: 1)
        // Room for the seal behind the largest packet: the primary is sealed in place.
        primary = UnsafeMutableRawBufferPointer.allocate(byteCount: OpusEncoder.maximumPacketSize + FrameSealer.maximumOverhead, alignment: 1)
        sealed = sealer == nil ? nil
            : UnsafeMutableRawBufferPointer.allocate(byteCount: OpusEncoder.maximumPacketSize + FrameSealer.maximumOverhead, alignment: 1)
        blocks.reserveCapacity(Self.maximumRedundantBlocks)
        try configure(setting, previous: nil)
    }

    deinit {
        slots.deallocate()
        primary.deallocate()
        sealed?.deallocate()
    }

    /// The encoder's frames before sealing, kept in slots beside the sealed ones, so the
    /// payload a packet carried can be written again as it was before sealing. Used only with
    /// `--packet-trace` in an end-to-end encrypted room; allocates once.
    private final class PlaintextMirror {
        private let slots: UnsafeMutableRawBufferPointer
        private var lengths: [Int]
        private let slotSize: Int
        private let primary: UnsafeMutableRawBufferPointer
        private var primaryCount = 0
        private var redundant: UnsafeMutableRawBufferPointer
        private var redundantCount = 0
        private let payload: UnsafeMutableRawBufferPointer

        init(slotCount: Int, slotSize: Int) {
            self.slotSize = slotSize
            slots = UnsafeMutableRawBufferPointer.allocate(byteCount: slotCount * slotSize, alignment: 1)
            lengths = Array(repeating: 0, count: slotCount)
            primary = UnsafeMutableRawBufferPointer.allocate(byteCount: OpusEncoder.maximumPacketSize, alignment: 1)
            redundant = UnsafeMutableRawBufferPointer.allocate(byteCount: slotSize, alignment: 1)
            payload = UnsafeMutableRawBufferPointer.allocate(byteCount: VoiceEncoder.maximumPayloadSize, alignment: 1)
        }

        deinit {
            slots.deallocate()
            primary.deallocate()
            redundant.deallocate()
            payload.deallocate()
        }

        private func slot(_ index: Int) -> UnsafeMutableRawBufferPointer {
            let wrapped = index % lengths.count
            return UnsafeMutableRawBufferPointer(rebasing: slots[wrapped * slotSize..<(wrapped + 1) * slotSize])
        }

        /// The frame's encodings before sealing.
        func keep(primary frame: UnsafeRawBufferPointer, redundant second: UnsafeRawBufferPointer?) {
            primaryCount = min(frame.count, primary.count)
            UnsafeMutableRawBufferPointer(rebasing: primary[0..<primaryCount]).copyMemory(from: UnsafeRawBufferPointer(rebasing: frame[0..<primaryCount]))
            redundantCount = min(second?.count ?? 0, redundant.count)
            if let second { UnsafeMutableRawBufferPointer(rebasing: redundant[0..<redundantCount]).copyMemory(from: UnsafeRawBufferPointer(rebasing: second[0..<redundantCount])) }
        }

        /// The payload with the copies from `distances` (a bit per distance) before the primary.
        func payload(newest: Int, distances: Int, frameSamples: Int) -> (payloadType: UInt8, bytes: UnsafeRawBufferPointer)? {
            var writer = ByteWriter(payload)
            let primaryBlock = REDPayload.Block(payloadType: RTPHeader.opusPayloadType, timestampOffset: 0,
                                                data: UnsafeRawBufferPointer(rebasing: primary[0..<primaryCount]))
            guard distances != 0 else {
                guard (try? writer.write(primaryBlock.data)) != nil else { return nil }
                return (RTPHeader.opusPayloadType, UnsafeRawBufferPointer(rebasing: payload[0..<writer.offset]))
            }
            var blocks: [REDPayload.Block] = []
            for distance in (1...VoiceEncoder.maximumDistance).reversed() where distances & (1 << distance) != 0 {
                let index = (newest - distance + 1 + lengths.count) % lengths.count
                blocks.append(REDPayload.Block(payloadType: RTPHeader.opusPayloadType, timestampOffset: UInt16(distance * frameSamples),
                                               data: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(slot(index))[0..<lengths[index]])))
            }
            guard (try? REDPayload.write(redundant: blocks, primary: primaryBlock, to: &writer)) != nil else { return nil }
            return (RTPHeader.redPayloadType, UnsafeRawBufferPointer(rebasing: payload[0..<writer.offset]))
        }

        /// The frame just sent is the newest: its redundant form (second encoding, or the
        /// primary) is what later packets copy.
        func advance(to newest: Int, redundantKept: Bool) {
            let (source, count) = redundantKept ? (redundant, redundantCount) : (primary, primaryCount)
            let kept = min(count, slotSize)
            slot(newest).copyMemory(from: UnsafeRawBufferPointer(rebasing: source[0..<kept]))
            lengths[newest % lengths.count] = kept
        }
    }

    /// Samples per frame (per channel).
    public var frameSamples: Int { encoder.frameSamples }

    /// Takes a new setting; it applies from the next frame.
    public func apply(_ next: EncoderAdaptation.Setting) throws(OpusError) {
        guard next != setting else { return }
        let previous = setting
        setting = next
        try configure(next, previous: previous)
    }

    private func configure(_ next: EncoderAdaptation.Setting, previous: EncoderAdaptation.Setting?) throws(OpusError) {
        try encoder.setBitrate(next.bitrate)
        try encoder.setInbandFEC(next.expectedLossPercent > 0)
        try encoder.setExpectedLossPercent(next.expectedLossPercent)
        if next.redundancy.bitrate != previous?.redundancy.bitrate {
            // The history holds the other kind of block now: start it afresh.
            consecutive = 0
        }
        if let bitrate = next.redundancy.bitrate, !next.redundancy.distances.isEmpty {
            if redundantEncoder == nil {
                var configuration = OpusEncoder.Configuration()
                configuration.frameDuration = encoder.frameDuration
                configuration.channels = encoder.channels
                configuration.inbandFEC = false
                configuration.expectedLossPercent = 0
                configuration.bitrate = bitrate
                redundantEncoder = try OpusEncoder(configuration)
            }
            try redundantEncoder?.setBitrate(bitrate)
        } else {
            redundantEncoder = nil
        }
    }

    /// The next frame is not the one after the last encoded (a frame was not sent): nothing
    /// before it may be repeated after it.
    public func interrupt() { consecutive = 0 }

    /// Encodes one frame (`frameSamples × channels` samples) into `payload`, which must
    /// hold `maximumPayloadSize` bytes. `metadata` (the stream's SSRC and the frame's RTP
    /// timestamp) is what a seal covers besides the frame; without a sealer it is not used.
    public func encode(
        _ frame: UnsafeBufferPointer<Float>, metadata: FrameMetadata = FrameMetadata(ssrc: 0, timestamp: 0),
        into payload: UnsafeMutableRawBufferPointer
    ) throws(VoiceEncoderError) -> Output {
        var primaryCount: Int
        do {
            primaryCount = try encoder.encode(frame, into: primary)
        } catch {
            throw .opus(error)
        }
        var redundantCount: Int?
        if let redundantEncoder {
            let slot = slot(newest + 1)
            do { redundantCount = try redundantEncoder.encode(frame, into: slot) } catch { throw .opus(error) }
        } else {
            redundantCount = nil
        }
        if RTPPacketizer.isSilentDTXFrame(payloadCount: primaryCount) {
            consecutive = 0
            return .silence
        }
        lastPlaintextPayload = nil
        mirror?.keep(primary: UnsafeRawBufferPointer(rebasing: primary[0..<primaryCount]),
                     redundant: redundantCount.map { UnsafeRawBufferPointer(rebasing: slot(newest + 1)[0..<$0]) })
        if sealer != nil {
            // Each encoding sealed on its own, in its place: the primary, and the second
            // encoding in the slot it was made in.
            guard let count = seal(UnsafeMutableRawBufferPointer(rebasing: primary[0..<primaryCount]), metadata: metadata) else {
                consecutive = 0
                return .withheld
            }
            primaryCount = count
            if let made = redundantCount {
                redundantCount = seal(UnsafeMutableRawBufferPointer(rebasing: slot(newest + 1)[0..<made]), metadata: metadata)
            }
        }

        blocks.removeAll(keepingCapacity: true)
        var distancesUsed = 0  // bit N: the copy from N frames back went in
        // Oldest first, as RFC 2198's example orders them.
        for distance in setting.redundancy.distances.reversed() where distance >= 1 && distance <= consecutive && blocks.count < Self.maximumRedundantBlocks {
            // A block can say at most 16,383 samples back (long frames reach it sooner).
            guard distance * encoder.frameSamples <= Int(REDPayload.maximumTimestampOffset) else { continue }
            let index = (newest - distance + 1 + Self.slotCount) % Self.slotCount
            let length = lengths[index]
            guard length > 0, length <= REDPayload.maximumBlockLength else { continue }
            blocks.append(REDPayload.Block(
                payloadType: RTPHeader.opusPayloadType, timestampOffset: UInt16(distance * encoder.frameSamples),
                data: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(slot(index))[0..<length])))
            distancesUsed |= 1 << distance
        }
        if let mirror, sealer != nil {
            lastPlaintextPayload = mirror.payload(newest: newest, distances: distancesUsed, frameSamples: encoder.frameSamples)
        }

        let bytes = UnsafeRawBufferPointer(rebasing: primary[0..<primaryCount])
        let output: Output
        do {
            var writer = ByteWriter(payload)
            if blocks.isEmpty {
                try writer.write(bytes)
                output = .payload(payloadType: RTPHeader.opusPayloadType, count: writer.offset)
            } else {
                try REDPayload.write(
                    redundant: blocks, primary: REDPayload.Block(payloadType: RTPHeader.opusPayloadType, timestampOffset: 0, data: bytes),
                    to: &writer)
                output = .payload(payloadType: RTPHeader.redPayloadType, count: writer.offset)
            }
        } catch {
            throw .payload(error)
        }
        // Remember this frame's redundant form for the packets after it.
        newest = (newest + 1) % Self.slotCount
        mirror?.advance(to: newest, redundantKept: redundantCount != nil)
        if let redundantCount {
            lengths[newest] = redundantCount
        } else if primaryCount <= Self.slotSize {
            slot(newest).copyMemory(from: bytes)
            lengths[newest] = primaryCount
        } else {
            lengths[newest] = 0
        }
        consecutive = min(consecutive + 1, Self.maximumDistance)
        return output
    }

    /// Seals the `frame.count` bytes at `frame`'s start in place (through the sealing buffer);
    /// returns the sealed size, or nil when the frame may not be sent. A room without end-to-end
    /// encryption leaves it as it is.
    private func seal(_ frame: UnsafeMutableRawBufferPointer, metadata: FrameMetadata) -> Int? {
        guard var sealer, let sealed else { return frame.count }
        defer { self.sealer = sealer }
        switch sealer.seal(UnsafeRawBufferPointer(frame), metadata: metadata, into: sealed) {
        case .plain:
            return frame.count
        case let .sealed(count):
            let whole = UnsafeMutableRawBufferPointer(start: frame.baseAddress, count: count)
            whole.copyMemory(from: UnsafeRawBufferPointer(rebasing: sealed[0..<count]))
            return count
        case .withheld:
            return nil
        }
    }

    private func slot(_ index: Int) -> UnsafeMutableRawBufferPointer {
        let wrapped = index % Self.slotCount
        return UnsafeMutableRawBufferPointer(rebasing: slots[wrapped * Self.slotSize..<(wrapped + 1) * Self.slotSize])
    }
}

/// Why a frame could not be encoded: libopus refused, or the payload did not fit.
public enum VoiceEncoderError: Error, Sendable, CustomStringConvertible {
    case opus(OpusError)
    case payload(WireError)

    public var description: String {
        switch self {
        case let .opus(error): return "\(error)"
        case let .payload(error): return "the payload could not be built: \(error)"
        }
    }
}
