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
        switch payloadType {
        case RTPHeader.opusPayloadType:
            body(Frame(payload: payload, sequenceNumber: sequenceNumber, timestamp: timestamp, isRedundant: false))
            return true
        case RTPHeader.redPayloadType:
            guard let red = try? REDPayloadView(parsing: payload), red.primary.payloadType == RTPHeader.opusPayloadType else {
                return false
            }
            body(Frame(payload: red.primary.data, sequenceNumber: sequenceNumber, timestamp: timestamp, isRedundant: false))
            guard let frameSamples = OpusPacket.sampleCount(red.primary.data) else { return true }
            for block in red.prefix(VoiceEncoder.maximumRedundantBlocks) where block.payloadType == RTPHeader.opusPayloadType {
                guard let sequence = block.sequenceNumber(primarySequence: sequenceNumber, frameSamples: frameSamples) else { continue }
                body(Frame(
                    payload: block.data, sequenceNumber: sequence, timestamp: timestamp &- UInt32(block.timestampOffset),
                    isRedundant: true))
            }
            return true
        default:
            return false
        }
    }
}
