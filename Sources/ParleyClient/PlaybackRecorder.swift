import Foundation
import ParleyAudio
import ParleyBasics
import Synchronization

/// `--record-received`: one WAV file per remote speaker, each on the playback timeline (so
/// the files line up with one another and with what was heard), written by a thread of its
/// own so that the playback thread neither waits for the disk nor allocates.
///
/// The playback thread copies each speaker's period into a preallocated ring of slots
/// (``record(track:_:)``, lock-free, single producer); the writer thread empties the ring
/// every ``writeInterval``, sums the periods of SSRCs that share an identity, fills the gaps
/// with silence and appends to the files. A ring that fills (a disk far slower than real
/// time) drops periods and says so when the recordings close.
///
/// Tracks are identities: the network loop asks ``track(for:)`` when a speaker is named.
final class PlaybackRecorder: @unchecked Sendable {
    // @unchecked: the slot arrays are handed over through `head` and `tail` (release/acquire);
    // `position` is touched only by the playback thread; `tracks` only by the writer thread.

    /// Slots in the ring: about two seconds of eight speakers' 10 ms periods.
    static let slotCount = 1_600
    static let writeInterval: UInt64 = 20_000_000

    let directory: String
    let periodSamples: Int
    /// Samples played so far: where the period being mixed starts. Playback thread only.
    var position = 0

    private let samples: UnsafeMutablePointer<Float>
    private let slotTrack: UnsafeMutablePointer<Int>
    private let slotStart: UnsafeMutablePointer<Int>
    private let slotLength: UnsafeMutablePointer<Int>
    /// Slots filled by the playback thread, and emptied by the writer, since the start.
    private let head = Atomic<Int>(0)
    private let tail = Atomic<Int>(0)
    private let dropped = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    private let endPosition = Atomic<Int>(0)
    private let finished = DispatchSemaphore(value: 0)
    private let names = Mutex<[String]>([])

    private struct Track {
        var writer: WAVFileWriter?
        /// Samples written to the file so far.
        var written = 0
        /// The newest period, held back while another SSRC of the same identity may add to it.
        var pending: [Float]
        var pendingStart: Int?
    }

    private var tracks: [Int: Track] = [:]
    private var errors: [String] = []

    init(directory: String, periodSamples: Int = 480) {
        self.directory = directory
        self.periodSamples = periodSamples
        samples = .allocate(capacity: Self.slotCount * periodSamples)
        samples.initialize(repeating: 0, count: Self.slotCount * periodSamples)
        slotTrack = .allocate(capacity: Self.slotCount)
        slotTrack.initialize(repeating: 0, count: Self.slotCount)
        slotStart = .allocate(capacity: Self.slotCount)
        slotStart.initialize(repeating: 0, count: Self.slotCount)
        slotLength = .allocate(capacity: Self.slotCount)
        slotLength.initialize(repeating: 0, count: Self.slotCount)
        // Named from inside: Foundation gives the kernel a name set before `start()` only from the thread itself.
        let thread = Thread { [self] in
            Thread.current.name = "parley recorder"
            run()
        }
        thread.start()
    }

    deinit {
        samples.deallocate()
        slotTrack.deallocate()
        slotStart.deallocate()
        slotLength.deallocate()
    }

    /// The track of an identity, made the first time it is asked for. Network loop.
    func track(for identity: String) -> Int {
        names.withLock { names in
            if let index = names.firstIndex(of: identity) { return index }
            names.append(identity)
            return names.count - 1
        }
    }

    /// Playback thread: `period` is what `track` contributed to the period starting at
    /// ``position``. Copies it into the ring; never blocks, never allocates.
    func record(track: Int, _ period: UnsafeBufferPointer<Float>) {
        let filled = head.load(ordering: .relaxed)
        guard filled &- tail.load(ordering: .acquiring) < Self.slotCount, let source = period.baseAddress else {
            dropped.wrappingAdd(1, ordering: .relaxed)
            return
        }
        let slot = filled % Self.slotCount
        let count = min(period.count, periodSamples)
        (samples + slot * periodSamples).update(from: source, count: count)
        slotTrack[slot] = track
        slotStart[slot] = position
        slotLength[slot] = count
        head.store(filled &+ 1, ordering: .releasing)
    }

    /// Stops the writer once it has written everything, pads every file with silence to
    /// `end` (the samples played), closes them; returns what went wrong, if anything.
    func finish(at end: Int) -> [String] {
        endPosition.store(end, ordering: .relaxed)
        stopping.store(true, ordering: .releasing)
        finished.wait()
        return errors
    }

    // MARK: Writer thread

    private func run() {
        while true {
            let stop = stopping.load(ordering: .acquiring)
            drain()
            if stop { break }
            MonotonicClock.sleep(until: MonotonicClock.now() + Self.writeInterval)
        }
        let end = endPosition.load(ordering: .relaxed)
        for key in tracks.keys.sorted() {
            flushPending(key)
            if let writer = tracks[key]?.writer, let written = tracks[key]?.written {
                do {
                    try writer.appendSilence(end - written)
                    try writer.close()
                } catch {
                    errors.append("\(error)")
                }
            }
        }
        tracks.removeAll()
        let lost = dropped.load(ordering: .relaxed)
        if lost > 0 {
            errors.append("--record-received: the disk fell behind and \(lost) speaker periods of 10 ms are missing from the recordings")
        }
        finished.signal()
    }

    private func drain() {
        let filled = head.load(ordering: .acquiring)
        var taken = tail.load(ordering: .relaxed)
        while taken != filled {
            let slot = taken % Self.slotCount
            take(track: slotTrack[slot], start: slotStart[slot],
                 UnsafeBufferPointer(start: samples + slot * periodSamples, count: slotLength[slot]))
            taken &+= 1
            tail.store(taken, ordering: .releasing)
        }
    }

    private func take(track key: Int, start: Int, _ period: UnsafeBufferPointer<Float>) {
        if tracks[key] == nil { open(key) }
        if tracks[key]?.pendingStart == start {
            tracks[key]!.pending.withUnsafeMutableBufferPointer { pending in
                for index in 0..<min(pending.count, period.count) { pending[index] += period[index] }
            }
            return
        }
        flushPending(key)
        tracks[key]!.pending = Array(period)
        tracks[key]!.pendingStart = start
    }

    private func open(_ key: Int) {
        let identity = names.withLock { key < $0.count ? $0[key] : "track-\(key)" }
        let path = directory + "/" + Self.fileName(for: identity)
        do {
            tracks[key] = Track(writer: try WAVFileWriter(path: path), pending: [])
        } catch {
            errors.append("\(error)")
            tracks[key] = Track(writer: nil, pending: [])
        }
    }

    /// Writes a track's held-back period, after silence for any gap since the last one.
    private func flushPending(_ key: Int) {
        guard var track = tracks[key], let start = track.pendingStart else { return }
        defer { tracks[key] = track }
        track.pendingStart = nil
        guard let writer = track.writer else { return }
        // A period that overlaps what is written (it cannot, as the playback timeline only
        // moves on) would be cut to what is new.
        let skip = max(0, track.written - start)
        guard skip < track.pending.count else { return }
        do {
            try writer.appendSilence(start - track.written)
            try track.pending.withUnsafeBufferPointer { try writer.append(UnsafeBufferPointer(rebasing: $0[skip...])) }
            track.written = start + track.pending.count
        } catch {
            errors.append("\(error)")
            track.writer = nil
        }
    }

    /// A file name from an identity: identities are letters, digits, '.', '_' and '-'
    /// (`ParleyNames`), but a leading dot would hide the file, so it is replaced.
    static func fileName(for identity: String) -> String {
        let safe = String(identity.map { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" || $0 == "." ? $0 : "_" })
        return (safe.hasPrefix(".") ? "_" + safe.dropFirst() : safe) + ".wav"
    }
}
