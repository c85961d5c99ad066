import COpus

/// An Opus encoder (libopus) at 48 kHz, configured for voice.
///
/// Owns its `OpusEncoder*`; not thread-safe: the capture thread that produces the
/// outgoing stream owns it. Settings are typed properties; changing one (say the bitrate or
/// expected loss the relay reports) takes effect at the next frame.
public final class OpusEncoder {
    /// The libopus application: `voip` tunes for speech intelligibility (the default),
    /// `audio` for fidelity, `restrictedLowDelay` turns off SILK to save 2.5–4 ms.
    public enum Application: Sendable {
        case voip, audio, restrictedLowDelay

        var code: Int32 {
            switch self {
            case .voip: return OPUS_APPLICATION_VOIP
            case .audio: return OPUS_APPLICATION_AUDIO
            case .restrictedLowDelay: return OPUS_APPLICATION_RESTRICTED_LOWDELAY
            }
        }
    }

    public struct Configuration: Sendable {
        /// 1 (mono, the default) or 2.
        public var channels: Int = 1
        public var application: Application = .voip
        public var frameDuration: OpusFrameDuration = .ms20
        /// Bits per second, 6,000–510,000.
        public var bitrate: Int = 32_000
        /// 0 (cheapest) to 10 (best).
        public var complexity: Int = 9
        /// In-band forward error correction: each packet carries a low-bitrate copy of the
        /// previous frame, so a receiver can rebuild a lost packet N from packet N+1.
        public var inbandFEC: Bool = true
        /// The loss the encoder should protect against, 0–100 %; libopus spends FEC bits only
        /// when this is above 0.
        public var expectedLossPercent: Int = 10
        /// Discontinuous transmission: in silence, send a tiny packet every 400 ms instead of
        /// every frame.
        public var dtx: Bool = false

        public init() {}
    }

    private let state: OpaquePointer
    public let channels: Int
    public let frameDuration: OpusFrameDuration
    /// Samples per channel in one frame.
    public var frameSamples: Int { frameDuration.samples }

    public init(_ configuration: Configuration = Configuration()) throws(OpusError) {
        guard configuration.channels == 1 || configuration.channels == 2 else {
            throw OpusError(OPUS_BAD_ARG, "setup (channels must be 1 or 2, not \(configuration.channels))")
        }
        var error: Int32 = 0
        guard let state = opus_encoder_create(Int32(AudioClock.sampleRate), Int32(configuration.channels), configuration.application.code, &error),
            error == OPUS_OK
        else { throw OpusError(error, "encoder creation") }
        self.state = state
        self.channels = configuration.channels
        self.frameDuration = configuration.frameDuration
        try set(PARLEY_OPUS_SET_SIGNAL, OPUS_SIGNAL_VOICE, "signal type")
        try setBitrate(configuration.bitrate)
        try setComplexity(configuration.complexity)
        try setInbandFEC(configuration.inbandFEC)
        try setExpectedLossPercent(configuration.expectedLossPercent)
        try setDTX(configuration.dtx)
    }

    deinit { opus_encoder_destroy(state) }

    // MARK: Settings

    public func setBitrate(_ bitsPerSecond: Int) throws(OpusError) {
        guard (6_000...510_000).contains(bitsPerSecond) else {
            throw OpusError(OPUS_BAD_ARG, "bitrate \(bitsPerSecond) b/s (allowed 6,000–510,000)")
        }
        try set(PARLEY_OPUS_SET_BITRATE, Int32(bitsPerSecond), "bitrate")
    }

    public var bitrate: Int {
        var value: Int32 = 0
        _ = parley_opus_encoder_get_int(state, PARLEY_OPUS_GET_BITRATE, &value)
        return Int(value)
    }

    public func setComplexity(_ complexity: Int) throws(OpusError) {
        guard (0...10).contains(complexity) else { throw OpusError(OPUS_BAD_ARG, "complexity \(complexity) (allowed 0–10)") }
        try set(PARLEY_OPUS_SET_COMPLEXITY, Int32(complexity), "complexity")
    }

    public func setInbandFEC(_ on: Bool) throws(OpusError) {
        try set(PARLEY_OPUS_SET_INBAND_FEC, on ? 1 : 0, "in-band FEC")
    }

    /// Called when the relay reports loss: libopus then spends more bits on FEC.
    public func setExpectedLossPercent(_ percent: Int) throws(OpusError) {
        guard (0...100).contains(percent) else { throw OpusError(OPUS_BAD_ARG, "expected loss \(percent) % (allowed 0–100)") }
        try set(PARLEY_OPUS_SET_PACKET_LOSS_PERC, Int32(percent), "expected packet loss")
    }

    public func setDTX(_ on: Bool) throws(OpusError) {
        try set(PARLEY_OPUS_SET_DTX, on ? 1 : 0, "DTX")
    }

    /// Samples of look-ahead the encoder adds to the outgoing path's latency.
    public var lookahead: Int {
        var value: Int32 = 0
        _ = parley_opus_encoder_get_int(state, PARLEY_OPUS_GET_LOOKAHEAD, &value)
        return Int(value)
    }

    /// True while DTX is suppressing frames (the last frame was silence).
    public var isInDTX: Bool {
        var value: Int32 = 0
        _ = parley_opus_encoder_get_int(state, PARLEY_OPUS_GET_IN_DTX, &value)
        return value != 0
    }

    private func set(_ request: Int32, _ value: Int32, _ what: String) throws(OpusError) {
        let result = parley_opus_encoder_set_int(state, request, value)
        guard result == OPUS_OK else { throw OpusError(result, "setting \(what)") }
    }

    // MARK: Encoding

    /// The largest packet one frame can produce (RFC 6716 allows 1275 bytes per frame and
    /// three frames per 60 ms packet); a buffer this size never truncates.
    public static let maximumPacketSize = 4_000

    /// Encodes one frame (`frameSamples × channels` interleaved samples, −1…1) into
    /// `packet`; returns the packet length. With DTX on, a length of 1–2 bytes means
    /// "silence, need not be sent".
    public func encode(_ frame: UnsafeBufferPointer<Float>, into packet: UnsafeMutableRawBufferPointer) throws(OpusError) -> Int {
        guard frame.count == frameSamples * channels else {
            throw OpusError(OPUS_BAD_ARG, "encode (\(frame.count) samples given, a \(frameDuration) frame needs \(frameSamples * channels))")
        }
        guard let out = packet.baseAddress?.assumingMemoryBound(to: UInt8.self), let input = frame.baseAddress else {
            throw OpusError(OPUS_BUFFER_TOO_SMALL, "encode")
        }
        let result = opus_encode_float(state, input, Int32(frameSamples), out, Int32(packet.count))
        guard result >= 0 else { throw OpusError(result, "encode") }
        return Int(result)
    }

    /// Convenience for tests and offline tools: encodes one frame into a new array.
    public func encode(_ frame: [Float]) throws(OpusError) -> [UInt8] {
        var packet = [UInt8](repeating: 0, count: Self.maximumPacketSize)
        var count = 0
        var failure: OpusError?
        frame.withUnsafeBufferPointer { input in
            packet.withUnsafeMutableBytes { output in
                do throws(OpusError) { count = try encode(input, into: output) } catch { failure = error }
            }
        }
        if let failure { throw failure }
        return Array(packet[..<count])
    }

    /// Forgets all history, as for a new stream.
    public func reset() { _ = parley_opus_encoder_reset(state) }
}
