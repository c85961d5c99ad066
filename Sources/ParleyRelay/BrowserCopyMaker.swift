import ParleyWebRTC
import ParleyWire

/// What makes a forwarded RTP packet one browser's copy, in place in the send batch's slot
/// before SRTP protects it: renumbered for the browser (``RTPPayloadMapping``), marked with
/// the MID of the slot its voice plays on (``BrowserReceivers``), a RED copy completed with the
/// frame two packets back (``BrowserRedundancy``).
///
/// The header is parsed once, when the copy is made; each step reads the layout from that view
/// and hands on the view of what it wrote, so no step parses again. Nothing here allocates.
/// Several loops make copies for one browser at once: the slots and the frames are behind
/// their own locks. (`package` for parley-bench's allocation count.)
package struct BrowserCopyMaker: Sendable {
    /// The browser's payload types and extension ids against Parley's.
    let mapping: RTPPayloadMapping
    /// Its slots; nil when it did not negotiate the MID extension.
    let receivers: BrowserReceivers?
    /// The frames that complete its RED copies; nil when it does not take RED.
    let redundancy: BrowserRedundancy?

    init(mapping: RTPPayloadMapping, receivers: BrowserReceivers?) {
        self.mapping = mapping
        self.receivers = receivers
        redundancy = mapping.red == nil ? nil : BrowserRedundancy()
    }

    /// For a browser that sent `offer`, with slots of its own that no roster updates (a page's
    /// leg shares its page's, which its rosters keep); for parley-bench.
    package init(offer: WebRTCOffer, allowRED: Bool) {
        self.init(mapping: RTPPayloadMapping(offer, allowRED: allowRED), receivers: BrowserReceivers(offer: offer))
    }

    /// The most bytes a copy grows by.
    package var maximumGrowth: Int {
        (receivers == nil ? 0 : RTPMidStamp.maximumGrowth) + (redundancy == nil ? 0 : EarlierFrames.maximumGrowth)
    }

    /// Makes the RTP packet in the first `count` bytes of `buffer` the browser's copy; its new
    /// length (it may grow up to `buffer.count`), or nil when the browser must not get it (RED
    /// to a browser that does not take it, a voice with no slot and no shared section, no room,
    /// or bytes that are not RTP, which the relay never forwards: it parsed the packet too).
    package func make(in buffer: UnsafeMutableRawBufferPointer, count: Int, nowNanoseconds: UInt64) -> Int? {
        guard count <= buffer.count, let parsed = try? RTPPacketView(parsing: UnsafeRawBufferPointer(rebasing: buffer[0..<count])),
              var packet = mapping.toBrowser(parsed, in: buffer) else { return nil }
        // After the renumbering, which must not touch the MID element under the browser's id.
        if let receivers {
            guard let stamped = receivers.stamp(packet, in: buffer, nowNanoseconds: nowNanoseconds) else { return nil }
            packet = stamped
        }
        guard let redundancy, let red = mapping.red else { return packet.bytes.count }
        return redundancy.complete(packet, in: buffer, red: red, opus: mapping.opus, nowNanoseconds: nowNanoseconds)
    }
}
