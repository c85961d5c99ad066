import ParleyWire

/// What one received RTP packet carries for the jitter buffer: its Opus frame, and, in a
/// RED payload (RFC 2198), earlier frames again, each with the sequence number and
/// timestamp of the packet it first travelled in.
///
/// A redundant block's sequence number is the primary's minus its timestamp offset in
/// whole frames of the primary's length (see `REDPayload.Block.sequenceNumber`); a block
/// that is not a whole number of frames back, or not Opus, is skipped, and at most
/// `VoiceEncoder.maximumRedundantBlocks` are read, so a hostile payload costs no more than
/// a sender's would.
public enum IncomingFrames {
    public struct Frame {
        public var payload: UnsafeRawBufferPointer
        public var sequenceNumber: UInt16
        public var timestamp: UInt32
        /// A copy of an earlier frame, from a later packet.
        public var isRedundant: Bool
    }

    /// Hands `body` the packet's frames, the primary first (the newest: the jitter buffer
    /// places the copies against it). Returns false, handing nothing, when the packet is not
    /// Opus or RED around Opus.
    @discardableResult
    public static func forEach(in packet: RTPPacketView, _ body: (Frame) -> Void) -> Bool {
        forEach(payloadType: packet.payloadType, payload: packet.payload, sequenceNumber: packet.sequenceNumber, timestamp: packet.timestamp, body)
    }

    /// The same, from a packet's fields (a `--packet-trace` entry, say).
    @discardableResult
    public static func forEach(
        payloadType: UInt8, payload: UnsafeRawBufferPointer, sequenceNumber: UInt16, timestamp: UInt32, _ body: (Frame) -> Void
    ) -> Bool {
        forEach(payloadType: payloadType, payload: payload, sequenceNumber: sequenceNumber, timestamp: timestamp,
                open: { frame, _ in .opened(frame) }, body) == .accepted
    }

    /// What became of a packet in ``forEach(payloadType:payload:sequenceNumber:timestamp:open:_:)``.
    enum Unwrapped: Equatable {
        /// Its frames were handed over (those that opened).
        case accepted
        /// Not Opus or RED around Opus, or (end-to-end encrypted) its own frame does not open.
        case rejected
        /// End-to-end encrypted, and the key of its own frame has not arrived: nothing was
        /// handed over; the packet may be tried again once it has.
        case keyMissing
    }

    /// The same, each frame first opened by `open` (its SFrame seal, in an end-to-end
    /// encrypted room), which is handed the sealed frame and its RTP timestamp. The primary is
    /// opened first: a RED payload's frame length comes from its Opus header, which is
    /// inside the seal. A copy that does not open is skipped; a primary that does not, ends it.
    static func forEach(
        payloadType: UInt8, payload: UnsafeRawBufferPointer, sequenceNumber: UInt16, timestamp: UInt32,
        open: (UnsafeRawBufferPointer, UInt32) -> FrameOpening, _ body: (Frame) -> Void
    ) -> Unwrapped {
        switch payloadType {
        case RTPHeader.opusPayloadType:
            switch open(payload, timestamp) {
            case let .opened(frame):
                body(Frame(payload: frame, sequenceNumber: sequenceNumber, timestamp: timestamp, isRedundant: false))
                return .accepted
            case .keyMissing: return .keyMissing
            case .rejected: return .rejected
            }
        case RTPHeader.redPayloadType:
            guard let red = try? REDPayloadView(parsing: payload), red.primary.payloadType == RTPHeader.opusPayloadType else {
                return .rejected
            }
            let frameSamples: Int?
            switch open(red.primary.data, timestamp) {
            case let .opened(primary):
                // Read before the copies are opened: they may reuse the primary's buffer.
                frameSamples = OpusPacket.sampleCount(primary)
                body(Frame(payload: primary, sequenceNumber: sequenceNumber, timestamp: timestamp, isRedundant: false))
            case .keyMissing: return .keyMissing
            case .rejected: return .rejected
            }
            guard let frameSamples else { return .accepted }
            for block in red.prefix(VoiceEncoder.maximumRedundantBlocks) where block.payloadType == RTPHeader.opusPayloadType {
                guard let sequence = block.sequenceNumber(primarySequence: sequenceNumber, frameSamples: frameSamples) else { continue }
                let copyTimestamp = timestamp &- UInt32(block.timestampOffset)
                guard case let .opened(copy) = open(block.data, copyTimestamp) else { continue }
                body(Frame(payload: copy, sequenceNumber: sequence, timestamp: copyTimestamp, isRedundant: true))
            }
            return .accepted
        default:
            return .rejected
        }
    }
}

/// What opening one frame gave: its plaintext (valid until the next frame is opened), no key
/// yet, or a frame that does not authenticate.
enum FrameOpening {
    case opened(UnsafeRawBufferPointer)
    case keyMissing
    case rejected
}
