import Synchronization

/// A jitter buffer shared between the network thread, which inserts packets, and the
/// playback thread, which reads (directly or through the `Mixer`). Each call takes a lock
/// for its own duration only; neither blocks on I/O nor allocates, and a read takes
/// at most about a tenth of a millisecond, so the playback thread never waits long.
public final class SharedJitterBuffer: AudioSource, @unchecked Sendable {
    // @unchecked: `buffer` is only touched while `lock` is held.
    private let lock = Mutex(())
    private let buffer: JitterBuffer

    public init(_ configuration: JitterBuffer.Configuration = JitterBuffer.Configuration()) throws {
        buffer = try JitterBuffer(configuration)
    }

    /// Network thread: one packet's Opus payload, sequence number, timestamp and arrival
    /// time; `isRedundant` for a redundant copy of an earlier frame (RFC 2198).
    public func insert(payload: UnsafeRawBufferPointer, sequenceNumber: UInt16, timestamp: UInt32, arrival: Double, isRedundant: Bool = false) {
        lock.withLock { _ in
            buffer.insert(payload: payload, sequenceNumber: sequenceNumber, timestamp: timestamp, arrival: arrival, isRedundant: isRedundant)
        }
    }

    /// Network thread: the frames of one packet (its own, and the RED copies of earlier ones)
    /// under one lock; `body` hands each to the `insert` it is given, payload, sequence number,
    /// timestamp and whether it is a copy. Holding the lock for the whole packet keeps the
    /// playback thread from reading between a frame and its copies, and costs one lock a packet.
    public func inserting(
        arrival: Double, _ body: (_ insert: (UnsafeRawBufferPointer, UInt16, UInt32, Bool) -> Void) -> Void
    ) {
        lock.withLock { _ in
            body { payload, sequenceNumber, timestamp, isRedundant in
                buffer.insert(payload: payload, sequenceNumber: sequenceNumber, timestamp: timestamp, arrival: arrival, isRedundant: isRedundant)
            }
        }
    }

    /// Playback thread: the next period of audio.
    public func read(into output: UnsafeMutableBufferPointer<Float>, now: Double) -> Bool {
        lock.withLock { _ in buffer.read(into: output, now: now) }
    }

    /// Any thread: the figures for the status line.
    public var statistics: JitterBufferStatistics { lock.withLock { _ in buffer.currentStatistics } }
}
