import ParleyBasics
import Synchronization

/// What the capture thread needs for every frame, and what it reports back, without a lock on
/// its path: whether media may go out (joined, allowed to publish, not muted), the SSRC and
/// join it belongs to, and the encoder setting the network loop decided. The loop and the
/// person's controls change it now and then; the capture thread keeps a copy it refreshes only
/// when it changed (``VersionedValue``). What it has sent comes back through ``sent``.
final class MediaGate: Sendable {
    struct State: Sendable {
        /// The link is joined and this member may publish: the capture thread sends.
        var open = false
        /// Bumped on every (re)join, so the capture thread starts a new talkspurt.
        var joinGeneration = 0
        /// Mute, deafen, push-to-talk: whether the person lets the microphone out.
        var controls = ControlState()
        /// The SSRC the link joined with (a new one if another member held ours); nil before joining.
        var ssrc: UInt32?
        var encoder: EncoderAdaptation.Setting
    }

    let state: VersionedValue<State>
    /// What the capture thread has sent.
    let sent = SentMedia()

    init(initialSetting: EncoderAdaptation.Setting) {
        state = VersionedValue(State(encoder: initialSetting))
    }

    @discardableResult
    func update<Result>(_ body: (inout State) -> Result) -> Result { state.update(body) }
    var snapshot: State { state.current }
}

/// The capture thread's figures, written once per frame without a lock and read by the loop
/// (sender reports, loss per packet sent) and the status line.
///
/// The sender report's four figures must be read together (an RTP timestamp with the time its
/// sample was captured), so they sit behind a sequence lock over atomics: the capture thread,
/// the only writer, never waits; a reader that saw a write under way reads again.
final class SentMedia: Sendable {
    let packets = Atomic<Int>(0)
    let bytes = Atomic<Int>(0)

    /// Odd while a write is under way; 0 before the first.
    private let sequence = Atomic<UInt64>(0)
    /// Packet count (high half) and octet count (low half); the RTP timestamp; the capture time.
    private let counts = Atomic<UInt64>(0)
    private let timestamp = Atomic<UInt64>(0)
    private let capturedAt = Atomic<UInt64>(0)

    /// The capture thread's report of the packet it just sent (only ever that thread).
    func record(_ sender: RTCPReporter.SenderState) {
        let start = sequence.load(ordering: .relaxed)
        sequence.store(start &+ 1, ordering: .relaxed)
        atomicMemoryFence(ordering: .releasing)
        counts.store(UInt64(sender.packetCount) << 32 | UInt64(sender.octetCount), ordering: .relaxed)
        timestamp.store(UInt64(sender.timestamp), ordering: .relaxed)
        capturedAt.store(sender.capturedAt, ordering: .relaxed)
        sequence.store(start &+ 2, ordering: .releasing)
    }

    /// The last packet's figures for the sender report; nil before the first packet.
    var sender: RTCPReporter.SenderState? {
        while true {
            let before = sequence.load(ordering: .acquiring)
            guard before != 0 else { return nil }
            let counts = counts.load(ordering: .relaxed)
            let timestamp = timestamp.load(ordering: .relaxed)
            let capturedAt = capturedAt.load(ordering: .relaxed)
            atomicMemoryFence(ordering: .acquiring)
            guard before & 1 == 0, sequence.load(ordering: .relaxed) == before else { continue }
            return RTCPReporter.SenderState(
                packetCount: UInt32(truncatingIfNeeded: counts >> 32), octetCount: UInt32(truncatingIfNeeded: counts),
                timestamp: UInt32(truncatingIfNeeded: timestamp), capturedAt: capturedAt)
        }
    }
}
