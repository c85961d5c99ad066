import Foundation
import ParleyAudio
import Synchronization

/// The remote speakers as the playback thread hears them: the `Mixer` over their jitter
/// buffers, who is who, and (with `--record-received`) each speaker's part handed to the
/// ``PlaybackRecorder``.
///
/// Shared by three threads: the playback thread mixes a period at a time, the network
/// loop adds and removes speakers as packets and rosters arrive, and the status line reads
/// levels. One lock guards it all; each call holds it briefly (a mix of a few speakers
/// takes well under a millisecond). Under it the playback thread does no I/O and allocates
/// nothing: recordings are copied into the recorder's preallocated ring.
public final class PlaybackMix: @unchecked Sendable {
    // @unchecked: every stored property below is touched only while `lock` is held.
    private let lock = Mutex(())
    private let mixer = Mixer<UInt32>()
    private var identities: [UInt32: String] = [:]
    private var taps: [UInt32: RecordingTap] = [:]
    private let recorder: PlaybackRecorder?
    /// Samples mixed since the start: the playback timeline every recording follows.
    private var samplesMixed = 0

    /// - Parameter recordingDirectory: where `--record-received` writes one WAV per speaker.
    public init(recordingDirectory: String?) {
        recorder = recordingDirectory.map { PlaybackRecorder(directory: $0) }
    }

    // MARK: Network loop

    /// Adds a speaker's jitter buffer to the mix (or replaces the one it had).
    public func add(ssrc: UInt32, identity: String?, source: SharedJitterBuffer) {
        lock.withLock { _ in
            if let identity { identities[ssrc] = identity }
            if let recorder {
                let tap = RecordingTap(source: source, recorder: recorder, track: identity.map(recorder.track(for:)))
                taps[ssrc] = tap
                mixer.add(ssrc, source: tap)
            } else {
                mixer.add(ssrc, source: source)
            }
        }
    }

    public func remove(ssrc: UInt32) {
        lock.withLock { _ in
            mixer.remove(ssrc)
            taps[ssrc] = nil
            identities[ssrc] = nil
        }
    }

    /// Names a speaker once the roster says who owns the SSRC; a recording starts from then.
    public func name(ssrc: UInt32, identity: String) {
        lock.withLock { _ in
            guard mixer.contains(ssrc) else { return }
            identities[ssrc] = identity
            if let recorder, let tap = taps[ssrc] { tap.track = recorder.track(for: identity) }
        }
    }

    // MARK: Playback thread

    /// Mixes the next period at `now` (seconds, the call's timeline); each named speaker's
    /// part goes to their recording.
    public func mix(into output: UnsafeMutableBufferPointer<Float>, now: Double) {
        lock.withLock { _ in
            recorder?.position = samplesMixed
            mixer.mix(into: output, now: now)
            samplesMixed += output.count
        }
    }

    /// Ends the recordings: every file is padded with silence to the end of playback and
    /// closed. Returns the errors met while writing them, if any.
    public func finishRecordings() -> [String] {
        let (recorder, end) = lock.withLock { _ in (self.recorder, samplesMixed) }
        return recorder?.finish(at: end) ?? []
    }

    // MARK: Status

    /// The identities (or SSRCs, for a speaker not yet in the roster) speaking at `now`.
    public func speaking(now: Double) -> [String] {
        lock.withLock { _ in
            mixer.speaking(now: now).map { identities[$0] ?? String(format: "%08x", $0) }.sorted()
        }
    }

    /// Seconds of playback so far.
    public var playedSeconds: Double { lock.withLock { _ in Double(samplesMixed) / Double(AudioClock.sampleRate) } }
}

/// Passes a jitter buffer's audio to the mixer and a copy of each period to the speaker's
/// recording, once the speaker is named.
final class RecordingTap: AudioSource {
    let source: SharedJitterBuffer
    let recorder: PlaybackRecorder
    var track: Int?

    init(source: SharedJitterBuffer, recorder: PlaybackRecorder, track: Int?) {
        self.source = source
        self.recorder = recorder
        self.track = track
    }

    func read(into output: UnsafeMutableBufferPointer<Float>, now: Double) -> Bool {
        let playing = source.read(into: output, now: now)
        if let track { recorder.record(track: track, UnsafeBufferPointer(output)) }
        return playing
    }
}
