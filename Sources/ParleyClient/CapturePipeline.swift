import ParleyAudio
import ParleyBasics
import ParleyDevices
import ParleyE2EE
import ParleyWire
import Synchronization

/// The outgoing stream, on the capture thread: read a period from the input, keep the raw
/// capture (`--record-raw`), clean it against what playback played (echo, noise), keep what
/// is sent (`--record-sent`), encode 20 ms Opus frames with DTX (and, as the path's loss
/// asks, RED copies of earlier frames or in-band FEC), packetise them as RTP with the audio
/// level, and hand each packet to the network (and to the `--packet-trace`, with where its
/// frame starts in the `--record-sent` recording).
///
/// ```
/// input ─▶ raw tap ─▶ OutgoingProcessor (reference from EchoReferenceTap) ─▶ sent tap
///       ─▶ VoiceEncoder (setting from EncoderAdaptation) ─▶ RTPPacketizer ─▶ send
/// ```
///
/// Everything here belongs to the capture thread; the only shared parts are the
/// ``MediaGate`` (whether to send, the encoder setting in; what was sent out), the reference
/// tap, and `CallStatus` for the rare things a person sees (the capture started, the input ended).
/// A frame takes no lock of this pipeline's: the gate is a copy refreshed only when it changed.
final class CapturePipeline {
    static let periodSamples = 480

    private let input: any AudioInput
    private let processor: OutgoingProcessor?
    private let encoder: VoiceEncoder
    private var packetizer: RTPPacketizer
    private let raw: WAVFileWriter?
    private let sent: WAVFileWriter?
    private let trace: PacketTraceWriter?
    private let tap: EchoReferenceTap
    private let gate: MediaGate
    /// This thread's copy of the gate, refreshed once per frame (without a lock unless it changed).
    private var gateCopy: VersionedValue<MediaGate.State>.Copy
    private let status: CallStatus
    private let send: (UnsafeRawBufferPointer) -> Bool
    private let silenceAfterInput: Bool
    private var setting: EncoderAdaptation.Setting
    private var joinGeneration = 0
    /// What a muted member encodes instead of the microphone (one frame of zeros).
    private lazy var silentFrame = [Float](repeating: 0, count: encoder.frameSamples)

    /// - Parameter processor: nil when neither echo cancellation nor noise suppression runs.
    init(input: any AudioInput, processor: OutgoingProcessor?, encoder: VoiceEncoder, ssrc: UInt32,
         raw: WAVFileWriter?, sent: WAVFileWriter?, trace: PacketTraceWriter?, tap: EchoReferenceTap, silenceAfterInput: Bool, gate: MediaGate, status: CallStatus,
         send: @escaping (UnsafeRawBufferPointer) -> Bool) {
        self.silenceAfterInput = silenceAfterInput
        self.input = input
        self.processor = processor
        self.encoder = encoder
        var generator = SystemRandomNumberGenerator()
        packetizer = RTPPacketizer(ssrc: ssrc, using: &generator)
        self.raw = raw
        self.sent = sent
        self.trace = trace
        self.tap = tap
        self.gate = gate
        self.status = status
        self.send = send
        let initial = gate.snapshot
        gateCopy = .init(placeholder: initial)
        setting = initial.encoder
    }

    /// Runs until `stop` is set or the input ends; throws when the device fails.
    func run(stop: StopFlag) throws(CallError) {
        let period = Self.periodSamples
        let frameSamples = encoder.frameSamples
        var capture = [Float](repeating: 0, count: period)
        let step = processor?.frameSamples ?? frameSamples
        precondition(frameSamples % step == 0, "the outgoing processor cleans whole parts of the encoder's frames")
        precondition(frameSamples % period == 0, "an encoder frame is a whole number of capture periods")
        var captured = [Float](repeating: 0, count: frameSamples)  // the frame's raw capture, a period at a time
        var cleaned = [Float](repeating: 0, count: frameSamples)
        var filled = 0
        var packet = [UInt8](repeating: 0, count: RTPPacketizer.maximumPacketSize)
        var encoded = [UInt8](repeating: 0, count: VoiceEncoder.maximumPayloadSize)
        var captureIndex = 0
        var frameCapturedAt: UInt64 = 0
        // Once a WAV input has run out, silence, paced like a device (the call goes on).
        var silenceDue: UInt64?

        while !stop.isRaised {
            var count: Int
            if let due = silenceDue {
                MonotonicClock.sleep(until: due)
                silenceDue = due + UInt64(period) * 1_000_000_000 / UInt64(AudioClock.sampleRate)
                count = period
                for index in 0..<period { capture[index] = 0 }
            } else {
                if captureIndex == 0 {
                    // The timeline's origin: a device (or a paced file) starts capturing when
                    // first read. Taken before the read, not after: a read that returns late
                    // on a busy machine must not move the origin.
                    let started = MonotonicClock.now()
                    status.update { if $0.captureStartedAt == nil { $0.captureStartedAt = started } }
                }
                do {
                    count = try capture.withUnsafeMutableBufferPointer { try input.read(into: $0) }
                } catch {
                    throw .device("the input stopped working: \(error)")
                }
                if count == 0 {
                    status.update { $0.inputEnded = true }
                    guard silenceAfterInput else { return }
                    silenceDue = MonotonicClock.now()
                    continue
                }
            }
            let readAt = MonotonicClock.now()
            for index in count..<period { capture[index] = 0 }
            if filled == 0 { frameCapturedAt = readAt - UInt64(period) * 1_000_000_000 / UInt64(AudioClock.sampleRate) }
            try capture.withUnsafeBufferPointer { buffer throws(CallError) in
                do { try raw?.append(UnsafeBufferPointer(rebasing: buffer[0..<count])) } catch { throw .cannotWriteOutput("--record-raw: \(error)") }
            }

            // Collect the frame's raw capture; the processor cleans it when it is whole (the
            // echo canceller works on the encoder's 20 ms, so waiting for it adds no delay).
            captured.withUnsafeMutableBufferPointer { capturedBuffer in
                capture.withUnsafeBufferPointer { captureBuffer in
                    (capturedBuffer.baseAddress! + filled).update(from: captureBuffer.baseAddress!, count: period)
                }
            }
            captureIndex += period
            filled += period
            guard filled == frameSamples else { continue }
            filled = 0
            let frameStart = captureIndex - frameSamples
            let voice: Bool = cleaned.withUnsafeMutableBufferPointer { cleanedBuffer in
                captured.withUnsafeBufferPointer { rawBuffer in
                    guard let processor else {
                        cleanedBuffer.baseAddress!.update(from: rawBuffer.baseAddress!, count: frameSamples)
                        return Self.rms(rawBuffer) > 0.003
                    }
                    var voice = false
                    for part in stride(from: 0, to: frameSamples, by: step) {
                        let played = tap.frame(captureIndex: frameStart + part, count: step)
                        voice = processor.process(
                            capture: UnsafeBufferPointer(rebasing: rawBuffer[part..<part + step]), played: played,
                            into: UnsafeMutableBufferPointer(rebasing: cleanedBuffer[part..<part + step])) || voice
                    }
                    return voice
                }
            }
            try cleaned.withUnsafeBufferPointer { buffer throws(CallError) in
                do { try sent?.append(buffer) } catch { throw .cannotWriteOutput("--record-sent: \(error)") }
            }
            try encodeAndSend(
                frame: cleaned, voice: voice, capturedAt: frameCapturedAt, startSample: frameStart,
                encoded: &encoded, packet: &packet)
        }
    }

    /// - Parameter startSample: where the frame starts in the captured (and `--record-sent`) signal.
    private func encodeAndSend(
        frame: [Float], voice: Bool, capturedAt: UInt64, startSample: Int, encoded: inout [UInt8], packet: inout [UInt8]
    ) throws(CallError) {
        gate.state.refresh(&gateCopy)
        let (open, transmits, generation, wanted, ssrc) = (
            gateCopy.value.open, gateCopy.value.controls.transmits, gateCopy.value.joinGeneration, gateCopy.value.encoder, gateCopy.value.ssrc)
        if wanted != setting {
            // The path's loss changed: protect against it as the adaptation decided.
            do { try encoder.apply(wanted) } catch { throw .unexpected("the encoder refused a setting: \(error)") }
            setting = wanted
            status.update { $0.currentBitrate = wanted.bitrate }
        }
        // Muted (or push-to-talk not held): the microphone is replaced by silence, which the
        // encoder sends as a talker falling silent does (a few quiet frames, then DTX), so a
        // listener hears the voice stop within a frame and knows the talker stopped: a stream
        // that just broke off would look like a stalled path, which is concealed for a while.
        let source = open && !transmits ? silentFrame : frame
        if generation != joinGeneration {
            joinGeneration = generation
            packetizer.startTalkspurt()
            if let ssrc, ssrc != packetizer.ssrc { packetizer.switchSource(to: ssrc) }
        }
        // What a seal covers besides the frame (end-to-end encrypted rooms): this stream and
        // the frame's place in it.
        let metadata = FrameMetadata(ssrc: packetizer.ssrc, timestamp: packetizer.nextTimestamp)
        let output: VoiceEncoder.Output
        do {
            output = try source.withUnsafeBufferPointer { input in
                try encoded.withUnsafeMutableBytes { try encoder.encode(input, metadata: metadata, into: $0) }
            }
        } catch {
            throw .unexpected("the encoder failed: \(error)")
        }
        guard open else {
            // Not joined (yet, or while reconnecting): nothing is sent, but the stream's clock
            // runs on, so a receiver sees a pause, not a jump back in time, and the first
            // packet after it carries the marker; no frame from before the pause is repeated
            // after it.
            packetizer.skip(samples: frame.count)
            encoder.interrupt()
            return
        }
        let payloadType: UInt8
        let length: Int
        switch output {
        case let .payload(type, count):
            (payloadType, length) = (type, count)
        case .silence:
            packetizer.skipSilence(samples: frame.count)  // DTX silence: nothing to send
            return
        case .withheld:
            // No key for a room that must be encrypted: the frame never leaves.
            packetizer.skip(samples: frame.count)
            return
        }
        let level = source.withUnsafeBufferPointer { AudioLevel(rms: Self.rms($0), voiceActivity: voice && transmits) }
        let size: Int
        do {
            size = try encoded.withUnsafeBytes { payload in
                try packet.withUnsafeMutableBytes { buffer in
                    try packetizer.packetize(
                        payload: UnsafeRawBufferPointer(rebasing: payload[0..<length]), payloadType: payloadType,
                        samples: frame.count, level: level, into: buffer)
                }
            }
        } catch {
            throw .unexpected("an RTP packet could not be built: \(error)")
        }
        let delivered = packet.withUnsafeBytes { send(UnsafeRawBufferPointer(rebasing: $0[0..<size])) }
        if delivered, let trace {
            packet.withUnsafeBytes { bytes in
                guard let view = try? RTPPacketView(parsing: UnsafeRawBufferPointer(rebasing: bytes[0..<size])) else { return }
                if let plain = encoder.lastPlaintextPayload {
                    // End-to-end encrypted: the trace keeps the person's own audio as it was
                    // before sealing, so it can be replayed and decoded.
                    var header = RTPHeader(view)
                    header.payloadType = plain.payloadType
                    guard let opened = try? header.serialized(payload: Array(plain.bytes)) else { return }
                    opened.withUnsafeBytes { raw in
                        guard let again = try? RTPPacketView(parsing: raw) else { return }
                        trace.record(.sent, again, nanoseconds: MonotonicClock.now(), frameStartSample: startSample)
                    }
                } else {
                    trace.record(.sent, view, nanoseconds: MonotonicClock.now(), frameStartSample: startSample)
                }
            }
        }
        let state = RTCPReporter.SenderState(
            packetCount: packetizer.packetCount, octetCount: packetizer.octetCount,
            timestamp: packetizer.nextTimestamp &- UInt32(frame.count), capturedAt: capturedAt)
        gate.sent.record(state)
        if delivered {
            gate.sent.packets.wrappingAdd(1, ordering: .relaxed)
            gate.sent.bytes.wrappingAdd(size, ordering: .relaxed)
        }
    }

    static func rms(_ samples: UnsafeBufferPointer<Float>) -> Float {
        var sum: Float = 0
        for sample in samples { sum += sample * sample }
        return samples.isEmpty ? 0 : (sum / Float(samples.count)).squareRoot()
    }
}
