import COpus

/// An Opus decoder (libopus) at 48 kHz: normal decoding, recovery of a lost packet from
/// the in-band FEC carried by the next one, and concealment (PLC) of an exact duration.
///
/// Owns its `OpusDecoder*`; not thread-safe: the jitter buffer that owns it calls it from
/// the playback thread.
public final class OpusDecoder {
    private let state: OpaquePointer
    public let channels: Int

    public init(channels: Int = 1) throws(OpusError) {
        guard channels == 1 || channels == 2 else {
            throw OpusError(OPUS_BAD_ARG, "setup (channels must be 1 or 2, not \(channels))")
        }
        var error: Int32 = 0
        guard let state = opus_decoder_create(Int32(AudioClock.sampleRate), Int32(channels), &error), error == OPUS_OK else {
            throw OpusError(error, "decoder creation")
        }
        self.state = state
        self.channels = channels
    }

    deinit { opus_decoder_destroy(state) }

    /// Samples per channel that `packet` decodes to, or nil if it is not a valid Opus packet.
    public static func sampleCount(of packet: UnsafeRawBufferPointer) -> Int? {
        guard let base = packet.baseAddress?.assumingMemoryBound(to: UInt8.self), !packet.isEmpty else { return nil }
        let count = opus_packet_get_nb_samples(base, Int32(packet.count), Int32(AudioClock.sampleRate))
        return count > 0 ? Int(count) : nil
    }

    /// Decodes `packet` into `output` (interleaved); returns samples per channel written.
    /// `output` must hold the packet's whole duration (up to 120 ms).
    public func decode(_ packet: UnsafeRawBufferPointer, into output: UnsafeMutableBufferPointer<Float>) throws(OpusError) -> Int {
        guard let data = packet.baseAddress?.assumingMemoryBound(to: UInt8.self), !packet.isEmpty else {
            throw OpusError(OPUS_INVALID_PACKET, "decode (empty packet)")
        }
        guard let out = output.baseAddress else { throw OpusError(OPUS_BUFFER_TOO_SMALL, "decode") }
        let result = opus_decode_float(state, data, Int32(packet.count), out, Int32(output.count / channels), 0)
        guard result >= 0 else { throw OpusError(result, "decode") }
        return Int(result)
    }

    /// Rebuilds the frame *before* `nextPacket` from the FEC data `nextPacket` carries.
    /// `samples` is the lost frame's duration per channel; exactly that many are written.
    /// If `nextPacket` carries no FEC (CELT mode, or the sender had FEC off), libopus
    /// conceals instead, so the output is still the right length.
    public func decodeFEC(from nextPacket: UnsafeRawBufferPointer, samples: Int, into output: UnsafeMutableBufferPointer<Float>) throws(OpusError) -> Int {
        guard let data = nextPacket.baseAddress?.assumingMemoryBound(to: UInt8.self), !nextPacket.isEmpty else {
            throw OpusError(OPUS_INVALID_PACKET, "FEC decode (empty packet)")
        }
        guard samples * channels <= output.count, let out = output.baseAddress else { throw OpusError(OPUS_BUFFER_TOO_SMALL, "FEC decode") }
        let result = opus_decode_float(state, data, Int32(nextPacket.count), out, Int32(samples), 1)
        guard result >= 0 else { throw OpusError(result, "FEC decode") }
        return Int(result)
    }

    /// Packet-loss concealment (or comfort noise after a DTX packet) for exactly `samples`
    /// per channel. libopus conceals in steps of 2.5 ms, so `samples` must be a multiple of
    /// 120; callers that need another length keep the rest for later.
    public func conceal(samples: Int, into output: UnsafeMutableBufferPointer<Float>) throws(OpusError) -> Int {
        guard samples % 120 == 0, samples > 0, samples * channels <= output.count, let out = output.baseAddress else {
            throw OpusError(OPUS_BAD_ARG, "concealment (\(samples) samples; must be a positive multiple of 120 that fits)")
        }
        let result = opus_decode_float(state, nil, 0, out, Int32(samples), 0)
        guard result >= 0 else { throw OpusError(result, "concealment") }
        return Int(result)
    }

    /// Duration per channel of the last packet decoded (or concealed).
    public var lastPacketDuration: Int {
        var value: Int32 = 0
        _ = parley_opus_decoder_get_int(state, PARLEY_OPUS_GET_LAST_PACKET_DURATION, &value)
        return Int(value)
    }

    public func reset() { _ = parley_opus_decoder_reset(state) }
}
