import ArgumentParser
import Foundation
import ParleyAudio
import ParleyClient
import ParleyE2EE
import ParleyWire

/// `parley-bench audio`: CPU per second of audio for each stage of the audio engine and for
/// a full-duplex call (one outgoing stream with echo cancellation at 48 kHz, three incoming
/// speakers), against baselines measured in the same run (a memcpy of the same audio, and
/// libopus encoding alone); then the algorithmic latency of the outgoing and incoming paths.
///
/// CPU is this thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so time spent waiting for the
/// other core's jobs does not count; each figure is the best of `--repeats` runs.
struct AudioBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audio",
        abstract: "CPU per second of audio for each audio stage and a full-duplex call, and the paths' latency.",
        discussion: """
            Build in release first:
              swift build -c release --product parley-bench && .build/release/parley-bench audio
            """)

    @Option(help: "Seconds of speech each stage processes.")
    var seconds: Int = 30

    @Option(help: "Runs per stage; the fastest counts.")
    var repeats: Int = 3

    func validate() throws {
        guard (2...600).contains(seconds) else { throw ValidationError("--seconds must be 2–600") }
        guard (1...20).contains(repeats) else { throw ValidationError("--repeats must be 1–20") }
    }

    func run() throws {
        let speech = try Self.speech(seconds: seconds)
        let far = Array(speech.reversed())  // a different talker-like signal for the far end
        let echo = Self.echo(of: far)
        let mic = zip(echo, speech).map { $0 + $1 * 0.5 }
        let audioSeconds = Double(speech.count) / Double(AudioClock.sampleRate)
        let packets = try Self.encode(speech)
        print("parley-bench audio: \(Int(audioSeconds)) s of speech per stage, best of \(repeats); CPU ms per second of audio")

        var rows: [(String, Double)] = []
        func measure(_ name: String, _ body: () throws -> Void) rethrows {
            var best = Double.infinity
            for _ in 0..<repeats { best = min(best, try Self.cpuSeconds(body)) }
            let perSecond = best / audioSeconds * 1_000
            rows.append((name, perSecond))
        }

        // Baselines.
        var sink = [Float](repeating: 0, count: 480)
        measure("baseline: memcpy of the audio, 10 ms at a time") {
            speech.withUnsafeBufferPointer { source in
                sink.withUnsafeMutableBufferPointer { target in
                    for start in stride(from: 0, to: source.count - 479, by: 480) {
                        target.baseAddress!.update(from: source.baseAddress! + start, count: 480)
                    }
                }
            }
        }
        try measure("baseline: libopus encode alone (32 kb/s, complexity 9, FEC)") { _ = try Self.encode(speech) }

        // Stages.
        try measure("Opus decode") {
            let decoder = try OpusDecoder()
            var out = [Float](repeating: 0, count: 960)
            for packet in packets {
                _ = try packet.withUnsafeBytes { bytes in try out.withUnsafeMutableBufferPointer { try decoder.decode(bytes, into: $0) } }
            }
        }
        try measure("echo canceller + preprocessor (200 ms tail, 20 ms frames)") {
            var configuration = OutgoingProcessor.Configuration()
            configuration.delay = .fixed(milliseconds: 40)
            try Self.runOutgoing(OutgoingProcessor(configuration), mic: mic, far: far)
        }
        try measure(Self.outgoingRow) { try Self.runOutgoing(OutgoingProcessor(), mic: mic, far: far) }
        measure("delay estimator (GCC-PHAT, 0–500 ms)") {
            let estimator = DelayEstimator()
            far.withUnsafeBufferPointer { f in
                mic.withUnsafeBufferPointer { m in
                    for start in stride(from: 0, to: f.count - 479, by: 480) {
                        estimator.process(far: UnsafeBufferPointer(rebasing: f[start..<start + 480]), capture: UnsafeBufferPointer(rebasing: m[start..<start + 480]))
                    }
                }
            }
        }
        try measure("jitter buffer (20 ms packets, 0–30 ms jitter; decode and time-stretch included)") {
            try Self.runJitterBuffers(count: 1, packets: packets, seconds: audioSeconds, mixer: nil)
        }
        measure("mixer (3 speakers, gains, limiter, levels)") {
            let mixer = Mixer<Int>()
            for index in 0..<3 { mixer.add(index, source: LoopSource(speech, offset: index * 48_000)) }
            var period = [Float](repeating: 0, count: 480)
            for index in 0..<(speech.count / 480) { period.withUnsafeMutableBufferPointer { mixer.mix(into: $0, now: Double(index) * 0.01) } }
        }
        try measure("jitter buffer through a 300 ms spike every 5 s (its backlog shortened at speed)") {
            try Self.runJitterBuffers(count: 1, packets: packets, seconds: audioSeconds, mixer: nil, spikes: true)
        }
        // End-to-end encryption: the sender's encode step with and without sealing each frame,
        // and what a listener does for each speaker's frames before its jitter buffer.
        try measure("sender's encode step (VoiceEncoder, 32 kb/s), plain room") { try Self.runVoiceEncoder(speech, sealing: false) }
        try measure("sender's encode step, end-to-end encrypted (each frame sealed: SFrame AES-128-GCM)") {
            try Self.runVoiceEncoder(speech, sealing: true)
        }
        let sealed = Self.seal(packets)
        // The sealing alone: the two encode-step rows above differ by it, but each moves by a
        // few ms per second between runs (libopus), more than the sealing costs.
        measure("sender: seal one stream's frames (SFrame header, AES-128-GCM)") { Self.sealOnly(packets) }
        measure("listener: open one speaker's frames (SFrame header, keyring, AES-128-GCM)") { Self.open(sealed.frames, with: sealed.key) }

        try measure("full-duplex call: 1 outgoing (AEC auto + Opus) + 3 incoming (jitter buffers + mixer)") {
            try Self.runOutgoing(OutgoingProcessor(), mic: mic, far: far, encode: true)
            let mixer = Mixer<Int>()
            try Self.runJitterBuffers(count: 3, packets: packets, seconds: audioSeconds, mixer: mixer)
        }

        // The jitter buffer's own work: its row minus plain decoding of the same packets.
        let decode = rows.first { $0.0 == "Opus decode" }!.1
        if let index = rows.firstIndex(where: { $0.0.hasPrefix("jitter buffer") }) {
            rows.insert(("jitter buffer without decoding (the row above minus Opus decode)", max(0, rows[index].1 - decode)), at: index + 1)
        }
        let memcpy = rows[0].1
        let opus = rows[1].1
        print("")
        print("| stage | CPU ms per s of audio | % of one core | × memcpy | × Opus encode |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for (name, value) in rows {
            print("| \(name) | \(Self.format(value, 3)) | \(Self.format(value / 10, 2)) % | \(Self.format(value / memcpy, 0)) | \(Self.format(value / opus, 2)) |")
        }
        let call = rows.last!.1
        let outgoing = rows.first { $0.0 == Self.outgoingRow }!.1
        print("")
        print("outgoing path: \(Self.format(outgoing / 10, 2)) % of one core, \(Self.format(outgoing / opus, 2)) × Opus encoding (target ≤ 1.5 %): \(outgoing / 10 <= 1.5 ? "met" : "NOT MET")")
        print("full-duplex call: \(Self.format(call / 10, 2)) % of one core (target ≤ 10 %): \(call / 10 <= 10 ? "met" : "NOT MET")")
        // What the call runs, stage by stage: the capture thread's processor and encode step,
        // three speakers' jitter buffers and the mixer.
        let encodeStep = rows.first { $0.0.hasPrefix("sender's encode step (") }!.1
        let jitter = rows.first { $0.0.hasPrefix("jitter buffer (") }!.1
        let mixing = rows.first { $0.0.hasPrefix("mixer") }!.1
        let stages = outgoing + encodeStep + 3 * jitter + mixing
        print("full-duplex call against the sum of its stages (outgoing path + encode step + 3 jitter buffers + mixer): "
              + "\(Self.format(call, 1)) against \(Self.format(stages, 1)) ms per second of audio, \(Self.format(call / stages, 3)) ×")
        let plainSender = rows.first { $0.0.hasPrefix("sender's encode step (") }!.1
        let sealingSender = rows.first { $0.0.hasPrefix("sender's encode step, end-to-end") }!.1
        let sealing = rows.first { $0.0.hasPrefix("sender: seal") }!.1
        let opening = rows.first { $0.0.hasPrefix("listener: open") }!.1
        print("end-to-end encryption adds \(Self.format(sealing, 3)) ms of CPU per second of audio at the sender "
              + "(the encode step with and without it: \(Self.format(sealingSender - plainSender, 3)) ms apart, within libopus's run-to-run spread) "
              + "and \(Self.format(opening, 3)) ms per speaker at the listener (target ≤ 1 ms each): "
              + "\(sealing <= 1 && opening <= 1 ? "met" : "NOT MET")")

        try reportReadTimes(packets: packets, seconds: audioSeconds)
        try reportLatency()
    }

    /// The playback thread's worst case: the jitter buffer's CPU time per 10 ms read, over
    /// jitter and spikes (decoding, FEC, concealment and time-stretching all happen in reads).
    func reportReadTimes(packets: [[UInt8]], seconds: Double) throws {
        var times = [Double]()
        times.reserveCapacity(Int(seconds * 100))
        try Self.runJitterBuffers(count: 1, packets: packets, seconds: seconds, mixer: nil, spikes: true, readTimes: &times)
        times.sort()
        func percentile(_ fraction: Double) -> String { Self.format(times[min(times.count - 1, Int(fraction * Double(times.count)))] * 1e6, 0) }
        print("")
        print("jitter buffer read (one 10 ms period, 0–30 ms jitter and a 300 ms spike every 5 s): CPU p50 \(percentile(0.5)) µs, p99 \(percentile(0.99)) µs, max \(Self.format(times.last! * 1e6, 0)) µs of the 10,000 µs period")
    }

    // MARK: Latency

    func reportLatency() throws {
        // Outgoing: capture frame → echo canceller/preprocessor → 20 ms Opus frame → decode.
        // Measured end to end on speech by cross-correlation; the parts are listed beside it.
        let speech = try Self.speech(seconds: 4)
        let silence = [Float](repeating: 0, count: speech.count)
        var configuration = OutgoingProcessor.Configuration()
        configuration.echoCanceller.denoise = false
        let processor = try OutgoingProcessor(configuration)
        let step = processor.frameSamples
        var processed = [Float](repeating: 0, count: speech.count)
        speech.withUnsafeBufferPointer { m in
            silence.withUnsafeBufferPointer { f in
                processed.withUnsafeMutableBufferPointer { o in
                    for start in stride(from: 0, to: m.count - step + 1, by: step) {
                        processor.process(
                            capture: UnsafeBufferPointer(rebasing: m[start..<start + step]), played: UnsafeBufferPointer(rebasing: f[start..<start + step]),
                            into: UnsafeMutableBufferPointer(rebasing: o[start..<start + step]))
                    }
                }
            }
        }
        let processingLag = Self.lag(of: processed, behind: speech)
        let encoder = try OpusEncoder()
        let lookahead = encoder.lookahead
        let framing = encoder.frameSamples
        let outgoing = Double(processingLag + lookahead + framing) / 48
        print("")
        print("outgoing path algorithmic latency: \(Self.format(outgoing, 1)) ms = capture-to-frame buffering \(framing / 48) ms (one 20 ms Opus frame) + Opus look-ahead \(Self.format(Double(lookahead) / 48, 1)) ms + echo canceller/preprocessor \(Self.format(Double(processingLag) / 48, 1)) ms (measured by cross-correlation)")

        // Incoming: packets that arrive exactly on time (no jitter), 10 s of them: the lag
        // of what the jitter buffer plays behind the decoded stream over the last 4 s
        // (after it has settled from its 40 ms start), plus one playback period.
        let longSpeech = try Self.speech(seconds: 10)
        let packets = try Self.encode(longSpeech)
        let decoder = try OpusDecoder()
        var decoded = [Float]()
        var frame = [Float](repeating: 0, count: 960)
        for packet in packets {
            _ = try packet.withUnsafeBytes { bytes in try frame.withUnsafeMutableBufferPointer { try decoder.decode(bytes, into: $0) } }
            decoded += frame
        }
        let buffer = try JitterBuffer()
        var played = [Float]()
        var next = 0
        var chunk = [Float](repeating: 0, count: 480)
        for read in 0..<(longSpeech.count / 480) {
            let now = Double(read) * 0.01
            // Packet k carries media time k·20 ms and arrives at k·20 ms.
            while next < packets.count, Double(next) * 0.02 <= now {
                buffer.insert(payload: packets[next], sequenceNumber: UInt16(next), timestamp: UInt32(next * 960), arrival: Double(next) * 0.02)
                next += 1
            }
            chunk.withUnsafeMutableBufferPointer { _ = buffer.read(into: $0, now: now) }
            played += chunk
        }
        let tail = 6 * AudioClock.sampleRate
        let bufferLag = Self.lag(of: Array(played[tail...]), behind: Array(decoded[tail...]), maximum: 9_600)
        let statistics = buffer.currentStatistics
        let incoming = Double(bufferLag) / 48 + 10
        print("incoming path algorithmic latency on a jitter-free network: \(Self.format(incoming, 1)) ms = jitter buffer \(Self.format(Double(bufferLag) / 48, 1)) ms (target \(Self.format(statistics.targetDelayMilliseconds, 1)) ms: a 3 ms margin and a 2.5 ms cross-fade reserve; the rest is where packets arrive between two 10 ms reads; measured once settled from the 40 ms start) + one 10 ms playback period. Network jitter raises the buffer's share to its 97th percentile plus the margin, and a frame more while packets are being lost.")
    }

    // MARK: Helpers

    /// Everything the capture thread does to a frame before Opus: delay estimation, echo
    /// cancellation, residual echo and noise suppression (`OutgoingProcessor` as a call runs it).
    static let outgoingRow = "outgoing path: delay estimator + echo canceller + preprocessor (as in a call)"

    static func cpuSeconds(_ body: () throws -> Void) rethrows -> Double {
        var start = timespec(), end = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start)
        try body()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &end)
        return Double(end.tv_sec - start.tv_sec) + Double(end.tv_nsec - start.tv_nsec) / 1e9
    }

    /// alsa-utils' recorded voices, one after another, repeated to `seconds`.
    static func speech(seconds: Int) throws -> [Float] {
        let voice = try recordedVoices()
        var result = [Float]()
        let total = seconds * AudioClock.sampleRate
        while result.count < total { result += voice }
        return Array(result.prefix(total))
    }

    /// alsa-utils' recorded human voices (not its noise), at 48 kHz, each followed by `gap`
    /// milliseconds of silence.
    static func recordedVoices(gapMilliseconds: Int = 0) throws -> [Float] {
        let directory = "/usr/share/sounds/alsa"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory))?.filter { $0.hasSuffix(".wav") && $0 != "Noise.wav" }.sorted() ?? []
        guard !names.isEmpty else { throw ValidationError("no recorded speech in \(directory); run Scripts/bootstrap (alsa-utils)") }
        var voice = [Float]()
        for name in names {
            let audio = try WAVAudio(contentsOf: "\(directory)/\(name)")
            voice += try Resampler.resample(audio.mono, from: audio.sampleRate, to: AudioClock.sampleRate)
            voice += [Float](repeating: 0, count: AudioClock.samples(milliseconds: gapMilliseconds))
        }
        return voice
    }

    /// A simple echo: 40 ms bulk delay, a decaying tap train, −6 dB.
    static func echo(of far: [Float]) -> [Float] {
        var echo = [Float](repeating: 0, count: far.count)
        let taps: [(Int, Float)] = [(1_920, 0.5), (2_100, 0.2), (2_600, -0.1), (3_400, 0.05)]
        for (delay, gain) in taps {
            for index in delay..<far.count { echo[index] += far[index - delay] * gain }
        }
        return echo
    }

    /// The sender's encode step over `signal`, each frame sealed with a media key or not.
    static func runVoiceEncoder(_ signal: [Float], sealing: Bool) throws {
        let key = SendingKey(sealing ? .sealed(MediaKey.fresh(epoch: 0).frameKey()) : .plain)
        let encoder = try VoiceEncoder(encoder: OpusEncoder(), setting: EncoderAdaptation().setting, sealer: sealing ? FrameSealer(source: key) : nil)
        var payload = [UInt8](repeating: 0, count: VoiceEncoder.maximumPayloadSize)
        try signal.withUnsafeBufferPointer { source in
            for (index, start) in stride(from: 0, to: source.count - 959, by: 960).enumerated() {
                _ = try payload.withUnsafeMutableBytes {
                    try encoder.encode(UnsafeBufferPointer(rebasing: source[start..<start + 960]),
                                       metadata: FrameMetadata(ssrc: 1, timestamp: UInt32(truncatingIfNeeded: index * 960)), into: $0)
                }
            }
        }
    }

    /// `packets` sealed as one sender would, and the key a listener derives to open them.
    static func seal(_ packets: [[UInt8]]) -> (frames: [(bytes: [UInt8], timestamp: UInt32)], key: MediaKey) {
        let key = MediaKey.fresh(epoch: 0)
        var sealer = FrameSealer(source: SendingKey(.sealed(key.frameKey())))
        var output = [UInt8](repeating: 0, count: OpusEncoder.maximumPacketSize + FrameSealer.maximumOverhead)
        var frames: [(bytes: [UInt8], timestamp: UInt32)] = []
        for (index, packet) in packets.enumerated() {
            let timestamp = UInt32(truncatingIfNeeded: index * 960)
            let outcome = packet.withUnsafeBytes { plain in
                output.withUnsafeMutableBytes { sealer.seal(plain, metadata: FrameMetadata(ssrc: 1, timestamp: timestamp), into: $0) }
            }
            if case let .sealed(count) = outcome { frames.append((Array(output[..<count]), timestamp)) }
        }
        return (frames, key)
    }

    /// What the sender adds per frame in an end-to-end encrypted room: the SFrame header and
    /// AES-128-GCM into one reused buffer, as the encode step does.
    static func sealOnly(_ packets: [[UInt8]]) {
        var sealer = FrameSealer(source: SendingKey(.sealed(MediaKey.fresh(epoch: 0).frameKey())))
        var output = [UInt8](repeating: 0, count: OpusEncoder.maximumPacketSize + FrameSealer.maximumOverhead)
        for (index, packet) in packets.enumerated() {
            let metadata = FrameMetadata(ssrc: 1, timestamp: UInt32(truncatingIfNeeded: index * 960))
            _ = packet.withUnsafeBytes { plain in output.withUnsafeMutableBytes { sealer.seal(plain, metadata: metadata, into: $0) } }
        }
    }

    /// What a listener does for each frame of one speaker: read its SFrame header, find the
    /// key in the speaker's keyring, open it.
    static func open(_ frames: [(bytes: [UInt8], timestamp: UInt32)], with key: MediaKey) {
        var keyring = SenderKeyring()
        keyring.install(key, now: 0)
        var plaintext = [UInt8](repeating: 0, count: OpusEncoder.maximumPacketSize)
        for frame in frames {
            frame.bytes.withUnsafeBytes { sealed in
                guard let header = try? SFrameHeader(parsing: sealed), let size = SFrameHeader.size(of: sealed),
                      let frameKey = keyring.key(for: header.keyID, now: 0) else { return }
                _ = FrameMetadata(ssrc: 1, timestamp: frame.timestamp).withBytes { metadata in
                    plaintext.withUnsafeMutableBytes { frameKey.open(sealed, headerSize: size, counter: header.counter, metadata: metadata, into: $0) }
                }
            }
        }
    }

    static func encode(_ signal: [Float]) throws -> [[UInt8]] {
        let encoder = try OpusEncoder()
        var packets = [[UInt8]]()
        var packet = [UInt8](repeating: 0, count: OpusEncoder.maximumPacketSize)
        try signal.withUnsafeBufferPointer { source in
            for start in stride(from: 0, to: source.count - 959, by: 960) {
                let count = try packet.withUnsafeMutableBytes { try encoder.encode(UnsafeBufferPointer(rebasing: source[start..<start + 960]), into: $0) }
                packets.append(Array(packet[..<count]))
            }
        }
        return packets
    }

    /// The capture thread's work on `mic`: the outgoing processor on every 10 ms, and with
    /// `encode` the sender's encode step on every 20 ms frame, as a call runs it (the
    /// ``VoiceEncoder`` at the setting a call starts with, as in the encode step's own row).
    static func runOutgoing(_ processor: OutgoingProcessor, mic: [Float], far: [Float], encode: Bool = false) throws {
        let encoder = try VoiceEncoder(encoder: OpusEncoder(), setting: EncoderAdaptation().setting)
        let frame = encoder.frameSamples
        precondition(frame % processor.frameSamples == 0)
        let step = processor.frameSamples
        var out = [Float](repeating: 0, count: frame)
        var packet = [UInt8](repeating: 0, count: VoiceEncoder.maximumPayloadSize)
        try mic.withUnsafeBufferPointer { m in
            try far.withUnsafeBufferPointer { f in
                try out.withUnsafeMutableBufferPointer { o in
                    for start in stride(from: 0, to: m.count - frame + 1, by: frame) {
                        for part in stride(from: 0, to: frame, by: step) {
                            processor.process(
                                capture: UnsafeBufferPointer(rebasing: m[start + part..<start + part + step]),
                                played: UnsafeBufferPointer(rebasing: f[start + part..<start + part + step]),
                                into: UnsafeMutableBufferPointer(rebasing: o[part..<part + step]))
                        }
                        if encode {
                            let metadata = FrameMetadata(ssrc: 1, timestamp: UInt32(truncatingIfNeeded: start))
                            _ = try packet.withUnsafeMutableBytes { try encoder.encode(UnsafeBufferPointer(o), metadata: metadata, into: $0) }
                        }
                    }
                }
            }
        }
    }

    /// `count` speakers' jitter buffers fed the same packets with 0–30 ms of jitter (and,
    /// with `spikes`, 300 ms more for the packets of 300 ms every 5 s, those behind them
    /// queued), read every 10 ms (through `mixer` when given).
    static func runJitterBuffers(count: Int, packets: [[UInt8]], seconds: Double, mixer: Mixer<Int>?, spikes: Bool = false) throws {
        var ignored = [Double]()
        try runJitterBuffers(count: count, packets: packets, seconds: seconds, mixer: mixer, spikes: spikes, readTimes: &ignored, timed: false)
    }

    /// The same, recording each read's CPU time (seconds) in `readTimes`.
    static func runJitterBuffers(
        count: Int, packets: [[UInt8]], seconds: Double, mixer: Mixer<Int>?, spikes: Bool, readTimes: inout [Double], timed: Bool = true
    ) throws {
        let buffers = try (0..<count).map { _ in try JitterBuffer() }
        if let mixer { for (index, buffer) in buffers.enumerated() { mixer.add(index, source: buffer) } }
        var generator = SystemRandomNumberGenerator()
        var queue = 0.0
        let arrivals = (0..<packets.count).map { index -> Double in
            let sent = Double(index) * 0.02
            let spike = spikes && sent >= 5 && sent.truncatingRemainder(dividingBy: 5) < 0.3 ? 0.3 : 0
            var arrival = sent + Double.random(in: 0..<0.03, using: &generator) + spike
            if spikes {
                arrival = max(arrival, queue)
                queue = arrival
            }
            return arrival
        }
        let order = arrivals.indices.sorted { arrivals[$0] < arrivals[$1] }
        var next = 0
        var chunk = [Float](repeating: 0, count: 480)
        for read in 0..<Int(seconds * 100) {
            let now = Double(read) * 0.01
            while next < order.count, arrivals[order[next]] <= now {
                let index = order[next]
                for buffer in buffers {
                    buffer.insert(payload: packets[index], sequenceNumber: UInt16(truncatingIfNeeded: index), timestamp: UInt32(index * 960), arrival: arrivals[index])
                }
                next += 1
            }
            var start = timespec(), end = timespec()
            if timed { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start) }
            chunk.withUnsafeMutableBufferPointer { output in
                if let mixer {
                    mixer.mix(into: output, now: now)
                } else {
                    for buffer in buffers { _ = buffer.read(into: output, now: now) }
                }
            }
            if timed {
                clock_gettime(CLOCK_THREAD_CPUTIME_ID, &end)
                readTimes.append(Double(end.tv_sec - start.tv_sec) + Double(end.tv_nsec - start.tv_nsec) / 1e9)
            }
        }
    }

    /// The lag (in samples, 0…maximum) at which `signal` best matches `reference`.
    static func lag(of signal: [Float], behind reference: [Float], maximum: Int = 4_800) -> Int {
        var best = 0
        var bestScore = -Double.infinity
        let length = min(reference.count, signal.count) - maximum
        for lag in stride(from: 0, through: maximum, by: 1) {
            var score = 0.0
            for index in stride(from: 0, to: length, by: 2) { score += Double(signal[index + lag] * reference[index]) }
            if score > bestScore {
                bestScore = score
                best = lag
            }
        }
        return best
    }

    static func format(_ value: Double, _ digits: Int) -> String { String(format: "%.\(digits)f", value) }
}

/// Plays a signal in a loop, from an offset: a speaker that never stops.
final class LoopSource: AudioSource {
    private let signal: [Float]
    private var position: Int

    init(_ signal: [Float], offset: Int) {
        self.signal = signal
        position = offset % signal.count
    }

    func read(into output: UnsafeMutableBufferPointer<Float>, now: Double) -> Bool {
        for index in 0..<output.count {
            output[index] = signal[position]
            position = (position + 1) % signal.count
        }
        return true
    }
}
