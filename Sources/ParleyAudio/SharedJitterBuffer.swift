import Synchronization

/// A jitter buffer shared between the network thread, which inserts packets, and the
/// playback thread, which reads (directly or through the `Mixer`). Each call takes a lock
/// for its own duration only; neither blocks on I/O, and a read takes well under a
/// millisecond, so the playback thread never waits long.
public final class SharedJitterBuffer: AudioSource, @unchecked Sendable {
    // @unchecked: `buffer` is only touched while `lock` is held.
    private let lock = Mutex(())
    private let buffer: JitterBuffer

    public init(_ configuration: JitterBuffer.Configuration = JitterBuffer.Configuration()) throws {
        buffer = try JitterBuffer(configuration)
    }

    /// Network thread: one packet's Opus payload, sequence number, timestamp and arrival
    /// time; `isRedundant` for a RED copy of an earlier frame (see `JitterBuffer.insert`).
    public func insert(payload: UnsafeRawBufferPointer, sequenceNumber: UInt16, timestamp: UInt32, arrival: Double, isRedundant: Bool = false) {
        lock.withLock { _ in
            buffer.insert(payload: payload, sequenceNumber: sequenceNumber, timestamp: timestamp, arrival: arrival, isRedundant: isRedundant)
        }
    }

    /// Playback thread: the next period of audio.
    public func read(into output: UnsafeMutableBufferPointer<Float>, now: Double) -> Bool {
        lock.withLock { _ in buffer.read(into: output, now: now) }
    }

    /// Any thread: the figures for the status line.
    public var statistics: JitterBufferStatistics { lock.withLock { _ in buffer.currentStatistics } }
}
