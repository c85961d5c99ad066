import Foundation
import ParleyAudio
import Synchronization

/// The remote speakers as the playback thread hears them: the `Mixer` over their jitter
/// buffers, who is who, and the per-speaker recordings of `--record-received`.
///
/// Shared by three threads: the playback thread mixes a period at a time, the network
/// loop adds and removes speakers as packets and rosters arrive, and the status line reads
/// levels. One lock guards it all; each call holds it briefly (a mix of a few speakers
/// takes well under a millisecond), and the lock is never held across I/O other than the
/// recordings' buffered appends.
public final class PlaybackMix: @unchecked Sendable {
    // @unchecked: every stored property below is touched only while `lock` is held.
    private let lock = Mutex(())
    private let mixer = Mixer<UInt32>()
    private var identities: [UInt32: String] = [:]
    private var taps: [UInt32: RecordingTap] = [:]
    private let recordingDirectory: String?
    private var recorders: [String: WAVFileWriter] = [:]
    private var recordingErrors: [String] = []
    /// Samples mixed since the start: the playback timeline every recording follows.
    private var samplesMixed = 0
    private var scratch: [Float] = []

    /// - Parameter recordingDirectory: where `--record-received` writes one WAV per speaker.
    public init(recordingDirectory: String?) {
        self.recordingDirectory = recordingDirectory
    }

    // MARK: Network loop

    /// Adds a speaker's jitter buffer to the mix (or replaces the one it had).
    public func add(ssrc: UInt32, identity: String?, source: SharedJitterBuffer) {
        lock.withLock { _ in
            let tap = RecordingTap(source: source)
            taps[ssrc] = tap
            mixer.add(ssrc, source: tap)
            if let identity { identities[ssrc] = identity }
        }
    }

    public func remove(ssrc: UInt32) {
        lock.withLock { _ in
            mixer.remove(ssrc)
            taps[ssrc] = nil
            identities[ssrc] = nil
        }
    }

    /// Names a speaker once the roster says who owns the SSRC.
    public func name(ssrc: UInt32, identity: String) {
        lock.withLock { _ in
            if taps[ssrc] != nil { identities[ssrc] = identity }
        }
    }

    // MARK: Playback thread

    /// Mixes the next period at `now` (seconds, the call's timeline) and records each
    /// speaker's part of it.
    public func mix(into output: UnsafeMutableBufferPointer<Float>, now: Double) {
        lock.withLock { _ in
            mixer.mix(into: output, now: now)
            if recordingDirectory != nil { record(periodSamples: output.count) }
            samplesMixed += output.count
        }
    }

    /// Appends this period to every speaker's recording (silence for those who are known
    /// but not in the mix now), creating a recording, padded with silence from the start of
    /// playback, the first time a speaker is heard.
    private func record(periodSamples: Int) {
        guard let directory = recordingDirectory else { return }
        if scratch.count < periodSamples { scratch = [Float](repeating: 0, count: periodSamples) }
        var contributions: [String: [Float]] = [:]
        for (ssrc, tap) in taps {
            guard let identity = identities[ssrc], let samples = tap.takeLastRead() else { continue }
            if var existing = contributions[identity] {
                for index in 0..<min(existing.count, samples.count) { existing[index] += samples[index] }
                contributions[identity] = existing
            } else {
                contributions[identity] = samples
            }
        }
        for identity in contributions.keys where recorders[identity] == nil {
            let path = directory + "/" + Self.fileName(for: identity)
            do {
                let writer = try WAVFileWriter(path: path)
                try writer.appendSilence(samplesMixed)
                recorders[identity] = writer
            } catch {
                recordingErrors.append("\(error)")
                recorders[identity] = nil
            }
        }
        for (identity, writer) in recorders {
            do {
                if let samples = contributions[identity] {
                    try samples.withUnsafeBufferPointer { try writer.append($0) }
                } else {
                    try writer.appendSilence(periodSamples)
                }
            } catch {
                recordingErrors.append("\(error)")
                recorders[identity] = nil
            }
        }
    }

    /// A file name from an identity: identities are letters, digits, '.', '_' and '-'
    /// (`ParleyNames`), but a leading dot would hide the file, so it is replaced.
    static func fileName(for identity: String) -> String {
        let safe = String(identity.map { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" || $0 == "." ? $0 : "_" })
        return (safe.hasPrefix(".") ? "_" + safe.dropFirst() : safe) + ".wav"
    }

    /// Closes the recordings; returns the errors met while writing them, if any.
    public func finishRecordings() -> [String] {
        lock.withLock { _ in
            for (_, writer) in recorders {
                do { try writer.close() } catch { recordingErrors.append("\(error)") }
            }
            recorders.removeAll()
            return recordingErrors
        }
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

/// Passes a jitter buffer's audio to the mixer and keeps a copy of the last period read,
/// for the speaker's recording.
final class RecordingTap: AudioSource {
    let source: SharedJitterBuffer
    private var last: [Float] = []
    private var fresh = false

    init(source: SharedJitterBuffer) { self.source = source }

    func read(into output: UnsafeMutableBufferPointer<Float>, now: Double) -> Bool {
        let playing = source.read(into: output, now: now)
        if last.count != output.count { last = [Float](repeating: 0, count: output.count) }
        for index in 0..<output.count { last[index] = output[index] }
        fresh = true
        return playing
    }

    /// The period read since the last call, once.
    func takeLastRead() -> [Float]? {
        guard fresh else { return nil }
        fresh = false
        return last
    }
}
