import ParleyE2EE
import ParleyWire

/// Opens the frames of one remote stream in an end-to-end encrypted room, for its jitter
/// buffer: each frame's SFrame header names the sender's key, which the member's keyring
/// (``MemberKeys``) holds or derives, and its seal also covers the stream's SSRC and the
/// frame's RTP timestamp.
///
/// A packet whose key has not arrived yet (a newcomer, the first frames of a fresh key that
/// overtook its package) is held, up to ``holdNanoseconds`` and ``maximumHeld`` packets, and
/// played once the key comes, as a late packet would be. Owned by the network loop; opens into
/// one preallocated buffer.
final class StreamDecryptor {
    let keys: MemberKeys
    private let ssrc: UInt32
    private let plaintext: UnsafeMutableRawBufferPointer
    /// Packets held for a key: their bytes and when they arrived.
    private(set) var held: [(packet: [UInt8], arrivedAt: UInt64, seconds: Double)] = []
    private var arrivalsSeen: Int
    /// Frames whose seal did not open (forged, damaged, or under a key we may not hold).
    private(set) var rejectedFrames = 0
    /// Packets given up because their key never came in time.
    private(set) var expiredPackets = 0

    /// About one jitter buffer's worth: a frame held longer would be too late to play anyway.
    static let holdNanoseconds: UInt64 = 1_000_000_000
    /// A second of a talker's packets.
    static let maximumHeld = 50
    /// The largest frame opened: more than any datagram carries.
    static let maximumFrameSize = 4_096

    init(keys: MemberKeys, ssrc: UInt32) {
        self.keys = keys
        self.ssrc = ssrc
        arrivalsSeen = keys.arrivals
        plaintext = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.maximumFrameSize, alignment: 1)
    }

    deinit { plaintext.deallocate() }

    /// Opens one sealed frame into the decryptor's buffer.
    func open(_ frame: UnsafeRawBufferPointer, timestamp: UInt32, now: UInt64) -> FrameOpening {
        // The size as written (a sender may encode a value in more bytes than it needs).
        guard let header = try? SFrameHeader(parsing: frame), let headerSize = SFrameHeader.size(of: frame) else {
            rejectedFrames += 1
            return .rejected
        }
        guard let key = keys.keyring.key(for: header.keyID, now: now) else { return .keyMissing }
        let opened = FrameMetadata(ssrc: ssrc, timestamp: timestamp).withBytes { metadata in
            key.open(frame, headerSize: headerSize, counter: header.counter, metadata: metadata, into: plaintext)
        }
        guard let opened else {
            rejectedFrames += 1
            return .rejected
        }
        return .opened(UnsafeRawBufferPointer(rebasing: plaintext[0..<opened]))
    }

    /// The packet with every frame that opens in place of its seal (copies that do not open
    /// left out), for the diagnostics that need the person's own audio as plain RTP:
    /// `--packet-trace` and `--copy-received-rtp`. Nil when its own frame does not open.
    /// Allocates; only those diagnostics call it.
    func opened(_ packet: RTPPacketView, now: UInt64) -> [UInt8]? {
        var primary: [UInt8]?
        var copies: [OwnedREDPayload.Block] = []
        let outcome = IncomingFrames.forEach(
            payloadType: packet.payloadType, payload: packet.payload, sequenceNumber: packet.sequenceNumber, timestamp: packet.timestamp,
            open: { open($0, timestamp: $1, now: now) }) { frame in
                if frame.isRedundant {
                    copies.append(.init(payloadType: RTPHeader.opusPayloadType, timestampOffset: UInt16(truncatingIfNeeded: packet.timestamp &- frame.timestamp),
                                        data: Array(frame.payload)))
                } else {
                    primary = Array(frame.payload)
                }
            }
        guard outcome == .accepted, let primary else { return nil }
        let payload: [UInt8]
        if packet.payloadType == RTPHeader.redPayloadType {
            // Oldest first, as they came.
            let red = OwnedREDPayload(redundant: copies, primary: .init(payloadType: RTPHeader.opusPayloadType, timestampOffset: 0, data: primary))
            guard let bytes = try? red.serialized() else { return nil }
            payload = bytes
        } else {
            payload = primary
        }
        return try? RTPHeader(packet).serialized(payload: payload)
    }

    /// Keeps a packet until its key arrives (the oldest goes when the hold is full);
    /// `arrivedAt` and `seconds` are when it came from the network.
    func hold(_ packet: UnsafeRawBufferPointer, arrivedAt: UInt64, seconds: Double) {
        if held.count >= Self.maximumHeld {
            held.removeFirst()
            expiredPackets += 1
        }
        held.append((Array(packet), arrivedAt, seconds))
    }

    /// The held packets to try again: all of them once new keys arrived, none otherwise;
    /// those held too long are given up.
    func takeHeld(now: UInt64) -> [(packet: [UInt8], arrivedAt: UInt64, seconds: Double)] {
        let before = held.count
        held.removeAll { now &- $0.arrivedAt > Self.holdNanoseconds }
        expiredPackets += before - held.count
        guard keys.arrivals != arrivalsSeen, !held.isEmpty else { return [] }
        arrivalsSeen = keys.arrivals
        defer { held = [] }
        return held
    }
}
