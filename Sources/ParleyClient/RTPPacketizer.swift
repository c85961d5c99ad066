import ParleyWire

/// Turns the encoder's output into this call's RTP stream (RFC 3550, RFC 7587, RFC 2198):
/// one SSRC, sequence numbers and 48 kHz timestamps from random starting points, the RFC
/// 6464 audio level in an RFC 8285 one-byte extension, and the marker bit on the first
/// packet of each talkspurt. Each packet's payload type is the payload's: Opus, or RED
/// when `VoiceEncoder` wrapped redundancy around it.
///
/// With Opus DTX the encoder marks silent frames as not worth sending (1–2 bytes). Those
/// are skipped (`skipSilence`): the timestamp advances, the sequence number does not, so a
/// receiver tells the sender's silence (timestamps jump, sequence numbers consecutive)
/// from loss (both jump), and the first packet after a skipped stretch carries the marker
/// (RFC 3551 §4.1).
///
/// Plain Swift, owned by the capture thread; it writes into the caller's buffer.
public struct RTPPacketizer: Sendable {
    public private(set) var ssrc: UInt32
    /// The sequence number the next packet sent will carry.
    public private(set) var nextSequenceNumber: UInt16
    /// The RTP timestamp of the next frame, sent or skipped.
    public private(set) var nextTimestamp: UInt32
    /// Packets and payload octets sent, for the sender report (RFC 3550 §6.4.1).
    public private(set) var packetCount: UInt32 = 0
    public private(set) var octetCount: UInt32 = 0
    /// Frames skipped as DTX silence.
    public private(set) var skippedFrames = 0
    private var inTalkspurt = false
    /// The audio-level extension, made once: each packet writes its level into it in place,
    /// where a new element and its one-byte array would be two allocations a packet.
    private var levelExtension = [AudioLevel(byte: 0x7F).element]

    /// The largest packet this produces: header, extension and the largest Opus packet.
    public static let maximumPacketSize = RTPHeader.fixedSize + 8 + VoiceEncoder.maximumPayloadSize

    public init(ssrc: UInt32, initialSequenceNumber: UInt16, initialTimestamp: UInt32) {
        self.ssrc = ssrc
        nextSequenceNumber = initialSequenceNumber
        nextTimestamp = initialTimestamp
    }

    /// Starts from random points, as RFC 3550 §5.1 asks (known starts help plaintext attacks).
    public init<Generator: RandomNumberGenerator>(ssrc: UInt32, using generator: inout Generator) {
        self.init(
            ssrc: ssrc, initialSequenceNumber: UInt16.random(in: 0...UInt16.max, using: &generator),
            initialTimestamp: UInt32.random(in: 0...UInt32.max, using: &generator))
    }

    /// A DTX frame: libopus needs it not sent. Whether a payload is one is decided by its size.
    public static func isSilentDTXFrame(payloadCount: Int) -> Bool { payloadCount <= 2 }

    /// Packs one payload of `payloadType` carrying a frame of `samples` (per channel, at
    /// 48 kHz) into `buffer`. Returns the packet's size.
    public mutating func packetize(
        payload: UnsafeRawBufferPointer, payloadType: UInt8, samples: Int, level: AudioLevel, into buffer: UnsafeMutableRawBufferPointer
    ) throws(WireError) -> Int {
        levelExtension[0].data[0] = level.byte
        let header = RTPHeader(
            marker: !inTalkspurt, payloadType: payloadType, sequenceNumber: nextSequenceNumber,
            timestamp: nextTimestamp, ssrc: ssrc, headerExtension: .elements(levelExtension))
        let size = try header.serialize(payload: payload, into: buffer)
        nextTimestamp &+= UInt32(truncatingIfNeeded: samples)
        inTalkspurt = true
        nextSequenceNumber &+= 1
        packetCount &+= 1
        octetCount &+= UInt32(truncatingIfNeeded: payload.count)
        return size
    }

    /// A frame of DTX silence, not sent: time runs on, the sequence does not, and the next
    /// packet starts a talkspurt.
    public mutating func skipSilence(samples: Int) {
        skip(samples: samples)
        skippedFrames += 1
    }

    /// A new talkspurt starts with the next packet (after a rejoin, say), so it carries the marker.
    public mutating func startTalkspurt() { inTalkspurt = false }

    /// Sends as `ssrc` from the next packet on (the relay gave our old one to another member):
    /// a new source, whose sender reports count from zero (RFC 3550 §6.4.1).
    public mutating func switchSource(to ssrc: UInt32) {
        self.ssrc = ssrc
        packetCount = 0
        octetCount = 0
        inTalkspurt = false
    }

    /// A frame that is not sent for another reason than DTX (the link is down): time runs
    /// on, the sequence does not, and the next packet starts a talkspurt.
    public mutating func skip(samples: Int) {
        nextTimestamp &+= UInt32(truncatingIfNeeded: samples)
        inTalkspurt = false
    }
}
