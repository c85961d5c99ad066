import ParleyBasics
import ParleyWire

/// What a frame's SFrame tag also covers besides its header: the RTP SSRC and timestamp of
/// the frame (a RED copy names its frame's own timestamp), so a relay cannot move a frame to
/// another stream or another time. 8 bytes, big-endian.
public struct FrameMetadata: Sendable, Hashable {
    public var ssrc: UInt32
    public var timestamp: UInt32

    public init(ssrc: UInt32, timestamp: UInt32) {
        self.ssrc = ssrc
        self.timestamp = timestamp
    }

    public static let size = 8

    /// Hands `body` the eight bytes, from the stack.
    public func withBytes<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        var bytes = (ssrc.bigEndian, timestamp.bigEndian)
        return withUnsafeBytes(of: &bytes) { body($0) }
    }
}

/// How this member's frames leave, handed from the network loop (which learns whether the
/// room is end-to-end encrypted and rotates the key) to the capture thread (which seals with
/// it). The loop takes a lock once per change; the capture thread's ``FrameSealer`` reads a
/// version per frame and takes the lock only when it moved (a join, a new key).
public final class SendingKey: Sendable {
    public enum Mode: Sendable {
        /// A room without end-to-end encryption: frames go as they are.
        case plain
        /// Sealed with this key.
        case sealed(SFrameKey)
        /// Not sent at all: the room must be end-to-end encrypted and no key is set yet (the
        /// join has not confirmed it), so nothing may leave in the clear.
        case withheld
    }

    fileprivate let current: VersionedValue<Mode>

    public init(_ mode: Mode) { current = VersionedValue(mode) }

    /// From the next frame on, frames go this way.
    public func use(_ mode: Mode) { current.update { $0 = mode } }

    public var mode: Mode { current.current }
}

/// The capture thread's side of frame encryption: seals each encoded frame as ``SendingKey``
/// says, counting frames under each key ID from zero, so no nonce repeats: a sender's key IDs
/// only grow within a call, and a new ID is a new key. Allocates nothing per frame.
public struct FrameSealer {
    public enum Outcome: Equatable {
        /// Send the frame as it is.
        case plain
        /// The sealed frame, this many bytes, is in the output buffer.
        case sealed(Int)
        /// Do not send the frame (no key yet, or the output was too small).
        case withheld
    }

    private let source: SendingKey
    /// The capture thread's copy of ``source``'s mode, refreshed when the loop changes it.
    private var mode = VersionedValue<SendingKey.Mode>.Copy(placeholder: .withheld)
    private var key: SFrameKey?
    private var counter: UInt64 = 0

    /// The most a seal adds to a frame: the longest header and the tag.
    public static let maximumOverhead = SFrameHeader.maximumSize + SFrameKey.tagSize

    public init(source: SendingKey) { self.source = source }

    /// Seals `frame` into `output`, or says to send it plain, or not at all.
    public mutating func seal(_ frame: UnsafeRawBufferPointer, metadata: FrameMetadata, into output: UnsafeMutableRawBufferPointer) -> Outcome {
        let latest: SFrameKey
        source.current.refresh(&mode)
        switch mode.value {
        case .plain: return .plain
        case .withheld: return .withheld
        case let .sealed(current): latest = current
        }
        if latest !== key {
            // The same ID again (the key handed over twice) must go on counting.
            if latest.keyID != key?.keyID { counter = 0 }
            key = latest
        }
        defer { counter &+= 1 }
        guard let size = metadata.withBytes({ latest.seal(frame, counter: counter, metadata: $0, into: output) }) else { return .withheld }
        return .sealed(size)
    }

    /// The KID of the key in use, for the status (nil before the first sealed frame).
    public var keyID: UInt64? { key?.keyID }
}
