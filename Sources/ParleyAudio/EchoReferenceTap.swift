import Synchronization

/// What the playback thread handed to the speaker, kept for the capture thread's echo
/// canceller: the far-end reference for each captured frame.
///
/// The two threads run on their devices' clocks, each a period at a time. When the
/// capture thread asks for the reference of a frame, the tap compares how far playback has
/// got with how far capture has got; that offset (less one period, so the reference is
/// never a sample the playback thread has yet to hand over) is then applied as a
/// constant, and the reference moves in lock step with the capture, sample for sample: an
/// adaptive echo filter cannot converge on a reference that shifts with every scheduling
/// hiccup. It is re-anchored only when the measured offset has been more than
/// `realignThreshold` away for `realignAfter` frames in a row (an xrun, or two devices
/// whose clocks drift apart). What remains, the device buffers and the room's acoustic
/// delay, is measured by the `OutgoingProcessor`'s delay estimator, which then reads the
/// ring that much later (`frame(captureIndex:count:)`, a `PlayedSignal`): by then the
/// playback thread has long handed those samples over, even when it runs a few periods
/// late on a busy machine.
///
/// Memory is bounded: the last `capacity` samples played; anything older reads as silence.
public final class EchoReferenceTap: Sendable {
    public static let defaultCapacity = 48_000 * 2

    private struct State {
        var ring: [Float]
        /// Samples played since the start.
        var written = 0
        /// Playback sample index − capture sample index, once anchored.
        var offset: Int?
        var disagreements = 0
        var realignments = 0
    }

    private let state: Mutex<State>
    private let capacity: Int
    /// A measured offset this far from the applied one counts as a disagreement.
    public let realignThreshold: Int
    public let realignAfter: Int

    public init(capacity: Int = EchoReferenceTap.defaultCapacity, realignThresholdSamples: Int = 1_440, realignAfter: Int = 50) {
        self.capacity = capacity
        realignThreshold = realignThresholdSamples
        self.realignAfter = realignAfter
        state = Mutex(State(ring: [Float](repeating: 0, count: capacity)))
    }

    /// Playback thread: `samples` are being handed to the device.
    public func played(_ samples: UnsafeBufferPointer<Float>) {
        state.withLock { state in
            var position = state.written % capacity
            for sample in samples {
                state.ring[position] = sample
                position += 1
                if position == capacity { position = 0 }
            }
            state.written += samples.count
        }
    }

    /// Capture thread: the played signal for the capture samples `captureIndex ..<
    /// captureIndex + count`, just read from the device. Measures the offset between the two
    /// threads (and re-anchors it when it has lastingly moved), once a frame.
    public func frame(captureIndex: Int, count: Int) -> Frame {
        state.withLock { state in
            guard state.written > 0 else { return }
            let measured = state.written - (captureIndex + 2 * count)
            guard let offset = state.offset else {
                state.offset = measured
                return
            }
            if abs(measured - offset) > realignThreshold {
                state.disagreements += 1
                if state.disagreements >= realignAfter {
                    state.offset = measured
                    state.disagreements = 0
                    state.realignments += 1
                }
            } else {
                state.disagreements = 0
            }
        }
        return Frame(tap: self, captureIndex: captureIndex)
    }

    /// Capture thread: fills `output` with the reference for the capture samples
    /// `captureIndex ..< captureIndex + output.count` (delay 0).
    public func reference(captureIndex: Int, into output: UnsafeMutableBufferPointer<Float>) {
        frame(captureIndex: captureIndex, count: output.count).read(delay: 0, into: output)
    }

    /// One capture frame's view of the ring.
    public struct Frame: PlayedSignal {
        let tap: EchoReferenceTap
        let captureIndex: Int

        public func read(delay: Int, into output: UnsafeMutableBufferPointer<Float>) {
            tap.read(from: captureIndex &- delay, into: output)
        }
    }

    private func read(from captureIndex: Int, into output: UnsafeMutableBufferPointer<Float>) {
        state.withLock { state in
            guard let offset = state.offset else {
                for index in output.indices { output[index] = 0 }
                return
            }
            let start = captureIndex + offset
            // What was played and is still in the ring: [max(start, oldest, 0), written).
            let first = max(start, state.written - capacity, 0)
            let end = min(start + output.count, state.written)
            guard let target = output.baseAddress else { return }
            guard first < end else {
                target.update(repeating: 0, count: output.count)
                return
            }
            target.update(repeating: 0, count: first - start)
            (target + (end - start)).update(repeating: 0, count: start + output.count - end)
            let capacity = capacity
            state.ring.withUnsafeBufferPointer { ring in
                // At most two runs: to the end of the ring, then from its start.
                var position = first
                while position < end {
                    let slot = position % capacity
                    let run = min(end - position, capacity - slot)
                    (target + (position - start)).update(from: ring.baseAddress! + slot, count: run)
                    position += run
                }
            }
        }
    }

    /// Times the offset between the two streams was re-anchored.
    public var realignments: Int { state.withLock { $0.realignments } }
}
