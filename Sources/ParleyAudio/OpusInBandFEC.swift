import ParleyWire

/// Whether an Opus packet carries in-band FEC (SILK's LBRR data) for the packet before
/// it: the jitter buffer keeps room for the next packet only when waiting for it can pay.
///
/// RFC 6716 §4.2.3–4.2.4: a SILK frame's range-coded data starts with one voice-activity
/// flag per 20 ms SILK frame (per channel), then one LBRR flag; each is coded with
/// probability ½, so they are the first bits of the first Opus frame's first byte. CELT-only
/// packets carry no FEC.
public enum OpusInBandFEC {
    public static func isCarried(by payload: UnsafeRawBufferPointer) -> Bool {
        guard let first = payload.first else { return false }
        let toc = OpusTOC(first)
        guard toc.mode != .celt, let byte = firstFrameByte(payload, toc: toc) else { return false }
        // SILK frames per Opus frame: one for 10 and 20 ms, two for 40, three for 60.
        let silkFrames = max(1, toc.samplesPerFrame / 960)
        var carried = (byte >> (7 - silkFrames)) & 1 == 1
        if toc.isStereo {
            // The side channel's flags follow the mid channel's.
            carried = carried || (byte >> (6 - 2 * silkFrames)) & 1 == 1
        }
        return carried
    }

    /// The first byte of the packet's first frame (RFC 6716 §3.2), without building the
    /// frame list for the common one- and two-frame packets: this runs under the lock the
    /// playback thread takes, and should not allocate.
    private static func firstFrameByte(_ payload: UnsafeRawBufferPointer, toc: OpusTOC) -> UInt8? {
        switch toc.frameCountCode {
        case 0, 1:
            return payload.count > 1 ? payload[1] : nil
        case 2:
            // A frame length of one byte (< 252) or two.
            guard payload.count > 1, payload[1] != 0 else { return nil }
            let offset = payload[1] < 252 ? 2 : 3
            return payload.count > offset ? payload[offset] : nil
        default:
            guard let packet = try? OpusPacket(parsing: payload), let frame = packet.frames.first, !frame.isEmpty else { return nil }
            return payload[frame.lowerBound]
        }
    }
}
