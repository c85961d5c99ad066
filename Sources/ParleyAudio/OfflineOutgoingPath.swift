/// Runs the outgoing path on recordings instead of devices: the code behind
/// `parley process`, which users run to tune echo cancellation for their set-up and
/// which the echo tests run too.
///
/// `mic` is what the microphone captured and `far` what the speaker played, both at
/// 48 kHz, mono, starting at the same instant. The output is what would be sent: the
/// cleaned capture, after an Opus round trip when asked, aligned with `mic` (the codec's
/// look-ahead removed) so the two can be compared sample by sample.
public enum OfflineOutgoingPath {
    public struct Options: Sendable {
        public var cancelEcho = true
        public var tailMilliseconds = 200
        public var delay: OutgoingProcessor.Delay = .automatic
        public var denoise = true
        /// Opus bitrate for the round trip, nil for none.
        public var opusBitrate: Int?
        public init() {}
    }

    public struct Report: Sendable {
        public var output: [Float]
        /// The delay the estimator settled on (automatic mode), in ms.
        public var estimatedDelayMilliseconds: Double?
        /// When the first estimate was published, in seconds from the start.
        public var firstEstimateSeconds: Double?
        /// The delay applied to the reference at the end, in ms.
        public var appliedDelayMilliseconds: Double
        /// Echo return loss enhancement, dB: microphone energy over output energy in the
        /// frames after the first 5 s (convergence) where the far end plays. Near-end speech
        /// in those frames lowers it, so it is a lower bound. Nil if there were none.
        public var erleDecibels: Double?
        /// Seconds of audio the ERLE figure covers.
        public var erleSeconds: Double
        /// Frames in which the preprocessor heard voice, as a fraction of all frames.
        public var voiceFraction: Double
        /// The loudspeaker models the path took, with when (seconds from the start); empty
        /// while the loudspeaker looked linear.
        public var loudspeakerModels: [(seconds: Double, model: LoudspeakerModel)] = []
    }

    public enum Error: Swift.Error, CustomStringConvertible, Equatable {
        case wrongRate(name: String, rate: Int)
        case notMono(name: String)
        case lengthsDiffer(mic: Double, far: Double)
        case empty(name: String)
        case invalidOption(String)

        public var description: String {
            switch self {
            case .wrongRate(let name, let rate):
                return "\(name) is \(rate) Hz; the outgoing path runs at 48,000 Hz. Resample it first: sox IN.wav -r 48000 OUT.wav"
            case .notMono(let name):
                return "\(name) is stereo; the outgoing path is mono. Mix it down first: sox IN.wav -c 1 OUT.wav"
            case .lengthsDiffer(let mic, let far):
                return "MIC lasts \(Self.seconds(mic)) and FAR \(Self.seconds(far)); they must be recorded over the same time (start together, same length within 20 ms)"
            case .empty(let name):
                return "\(name) holds no audio"
            case .invalidOption(let message):
                return message
            }
        }

        private static func seconds(_ value: Double) -> String {
            let rounded = (value * 1_000).rounded() / 1_000
            return "\(rounded) s"
        }
    }

    /// Checks that the two recordings can be processed together and returns their samples
    /// (FAR padded or trimmed by at most 20 ms to MIC's length).
    public static func validate(mic: WAVAudio, far: WAVAudio) throws(Error) -> (mic: [Float], far: [Float]) {
        for (name, audio) in [("MIC", mic), ("FAR", far)] {
            guard audio.sampleRate == AudioClock.sampleRate else { throw .wrongRate(name: name, rate: audio.sampleRate) }
            guard audio.channels == 1 else { throw .notMono(name: name) }
            guard audio.frameCount > 0 else { throw .empty(name: name) }
        }
        let slack = AudioClock.samples(milliseconds: 20)
        guard abs(mic.frameCount - far.frameCount) <= slack else { throw .lengthsDiffer(mic: mic.duration, far: far.duration) }
        var farSamples = far.samples
        if farSamples.count < mic.samples.count {
            farSamples += [Float](repeating: 0, count: mic.samples.count - farSamples.count)
        } else if farSamples.count > mic.samples.count {
            farSamples.removeLast(farSamples.count - mic.samples.count)
        }
        return (mic.samples, farSamples)
    }

    /// Processes `mic` against `far` (equal lengths, 48 kHz mono).
    public static func run(mic: [Float], far: [Float], options: Options) throws -> Report {
        precondition(mic.count == far.count, "validate() first")
        var configuration = OutgoingProcessor.Configuration()
        configuration.echoCanceller = .forUse(cancellingEcho: options.cancelEcho)
        configuration.echoCanceller.tailMilliseconds = options.tailMilliseconds
        configuration.echoCanceller.denoise = options.denoise
        configuration.delay = options.delay
        let processor = try OutgoingProcessor(configuration)
        let frame = processor.frameSamples
        let frames = (mic.count + frame - 1) / frame
        let padded = frames * frame
        let micPadded = mic + [Float](repeating: 0, count: padded - mic.count)
        let farPadded = far + [Float](repeating: 0, count: padded - far.count)
        var output = [Float](repeating: 0, count: padded)
        var voiceFrames = 0
        micPadded.withUnsafeBufferPointer { micBuffer in
            farPadded.withUnsafeBufferPointer { farBuffer in
                output.withUnsafeMutableBufferPointer { outBuffer in
                    for index in 0..<frames {
                        let range = index * frame..<(index + 1) * frame
                        let voice = processor.process(
                            capture: UnsafeBufferPointer(rebasing: micBuffer[range]),
                            played: UnsafeBufferPointer(rebasing: farBuffer[range]),
                            into: UnsafeMutableBufferPointer(rebasing: outBuffer[range]))
                        if voice { voiceFrames += 1 }
                    }
                }
            }
        }
        output.removeLast(padded - mic.count)
        if let bitrate = options.opusBitrate {
            output = try opusRoundTrip(output, bitrate: bitrate)
        }
        let applied = processor.appliedDelaySamples
        let erle = EchoMeasurement.erle(
            mic: mic, output: output, far: far, farDelaySamples: applied,
            from: AudioClock.samples(milliseconds: 5_000))
        return Report(
            output: output,
            estimatedDelayMilliseconds: processor.estimatedDelay?.milliseconds,
            firstEstimateSeconds: processor.firstEstimateAtSample.map { Double($0) / Double(AudioClock.sampleRate) },
            appliedDelayMilliseconds: AudioClock.milliseconds(samples: applied),
            erleDecibels: erle?.decibels,
            erleSeconds: erle?.seconds ?? 0,
            voiceFraction: frames > 0 ? Double(voiceFrames) / Double(frames) : 0,
            loudspeakerModels: (processor.loudspeaker?.changes ?? []).map {
                (Double($0.atFrame * frame) / Double(AudioClock.sampleRate), $0.model)
            })
    }

    /// Encodes and decodes `signal` in 20 ms frames, then removes the codec's delay so the
    /// result lines up with the input.
    public static func opusRoundTrip(_ signal: [Float], bitrate: Int) throws -> [Float] {
        var configuration = OpusEncoder.Configuration()
        configuration.bitrate = bitrate
        let encoder = try OpusEncoder(configuration)
        let decoder = try OpusDecoder()
        let frame = encoder.frameSamples
        let lookahead = encoder.lookahead
        let total = signal.count + lookahead
        let frames = (total + frame - 1) / frame
        let input = signal + [Float](repeating: 0, count: frames * frame - signal.count)
        var decoded = [Float](repeating: 0, count: frames * frame)
        var packet = [UInt8](repeating: 0, count: OpusEncoder.maximumPacketSize)
        for index in 0..<frames {
            let range = index * frame..<(index + 1) * frame
            let length = try input.withUnsafeBufferPointer { buffer in
                try packet.withUnsafeMutableBytes { try encoder.encode(UnsafeBufferPointer(rebasing: buffer[range]), into: $0) }
            }
            _ = try packet.withUnsafeBytes { bytes in
                try decoded.withUnsafeMutableBufferPointer { out in
                    try decoder.decode(UnsafeRawBufferPointer(rebasing: bytes[0..<length]), into: UnsafeMutableBufferPointer(rebasing: out[range]))
                }
            }
        }
        return Array(decoded[lookahead..<lookahead + signal.count])
    }
}
