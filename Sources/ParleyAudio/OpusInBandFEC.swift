import ParleyWire

/// Whether an Opus packet carries in-band FEC (SILK's LBRR data) for the packet before
/// it: the jitter buffer waits for the next packet only when that wait can pay.
///
/// RFC 6716 §4.2.3–4.2.4: a SILK frame's range-coded data starts with one voice-activity
/// flag per 20 ms SILK frame (per channel), then one LBRR flag; each is coded with
/// probability ½, so they are the first bits of the first Opus frame's first byte. CELT-only
/// packets carry no FEC.
enum OpusInBandFEC {
    static func isCarried(by payload: UnsafeRawBufferPointer) -> Bool {
        guard let packet = try? OpusPacket(parsing: payload), packet.toc.mode != .celt,
              let first = packet.frames.first, !first.isEmpty else { return false }
        let byte = payload[first.lowerBound]
        // SILK frames per Opus frame: one for 10 and 20 ms, two for 40, three for 60.
        let silkFrames = max(1, packet.toc.samplesPerFrame / 960)
        var carried = (byte >> (7 - silkFrames)) & 1 == 1
        if packet.toc.isStereo {
            // The side channel's flags follow the mid channel's.
            carried = carried || (byte >> (6 - 2 * silkFrames)) & 1 == 1
        }
        return carried
    }
}
