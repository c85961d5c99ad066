/// Writes the RTP MID header extension (RFC 8843 §15, `urn:ietf:params:rtp-hdrext:sdes:mid`)
/// into an RTP packet in place, so that a WebRTC receiver routes the packet's SSRC to the
/// media section (transceiver) the MID names, even though its answer named no SSRC there.
///
/// The packet's extension block is replaced by a one-byte-form block (RFC 8285 §4.2) that
/// holds at most two elements: the element with `keepingID` from the packet's own one-byte
/// block (the audio level, when the receiver negotiated it), then the MID. Anything else the
/// block held is dropped: the receiver negotiated only those two, and an element under the MID's
/// id from elsewhere (another browser's own MID) must never route the packet. The payload moves
/// by the difference; nothing is allocated.
public enum RTPMidStamp {
    /// The most a packet can grow: from no extension to a block of a 4-byte header, a kept
    /// element of up to 17 bytes and a MID element of up to 17, padded to a 32-bit boundary.
    public static let maximumGrowth = 4 + 36

    /// A MID a one-byte element can carry (1 to 16 bytes), from the characters RFC 8843's
    /// `token` allows that need no escaping anywhere.
    public static func isUsable(mid: String) -> Bool {
        let bytes = Array(mid.utf8)
        return (1...16).contains(bytes.count) && bytes.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".")
        }
    }

    /// The one-byte element for `mid` under `id`: the header byte, then the MID's bytes. Nil if
    /// the id is not 1–14 or the MID is not usable.
    public static func element(mid: String, id: UInt8) -> [UInt8]? {
        guard (1...14).contains(id), isUsable(mid: mid) else { return nil }
        let bytes = Array(mid.utf8)
        return [id << 4 | UInt8(bytes.count - 1)] + bytes
    }

    /// Stamps `midElement` (from ``element(mid:id:)``) into `packet`, which was parsed from the
    /// first bytes of `buffer` and may grow up to `buffer.count`. Returns the view of the
    /// stamped packet, or nil (the packet unchanged) if the buffer is too short.
    public static func stamp(
        _ packet: RTPPacketView, in buffer: UnsafeMutableRawBufferPointer, midElement: UnsafeRawBufferPointer, keepingID: UInt8?
    ) -> RTPPacketView? {
        packet.requireParsed(from: buffer)
        guard (2...17).contains(midElement.count), let base = buffer.baseAddress else { return nil }
        let count = packet.bytes.count
        let headerStart = RTPHeader.fixedSize + 4 * packet.csrcCount
        let payloadStart = packet.payloadRange.lowerBound
        // The new block, built aside first: the kept element's bytes are in the part of the
        // packet that is about to move.
        var block: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0)  // 48 zeroed bytes
        return withUnsafeMutableBytes(of: &block) { block -> RTPPacketView? in
            block[0] = 0xBE
            block[1] = 0xDE
            var used = 4
            if let keepingID, packet.extensionProfile == RTPHeaderExtension.oneByteProfile {
                for element in packet.headerExtensionElements where element.id == keepingID && (1...16).contains(element.data.count) {
                    block[used] = keepingID << 4 | UInt8(element.data.count - 1)
                    UnsafeMutableRawBufferPointer(rebasing: block[(used + 1)...]).copyMemory(from: element.data)
                    used += 1 + element.data.count
                    break
                }
            }
            UnsafeMutableRawBufferPointer(rebasing: block[used...]).copyMemory(from: midElement)
            used += midElement.count
            let blockSize = (used + 3) / 4 * 4  // the rest is zero: padding bytes
            let words = (blockSize - 4) / 4
            block[2] = UInt8(words >> 8)
            block[3] = UInt8(words & 0xFF)
            let newPayloadStart = headerStart + blockSize
            let newCount = newPayloadStart + (count - payloadStart)
            guard newCount <= buffer.count else { return nil }
            (base + newPayloadStart).copyMemory(from: base + payloadStart, byteCount: count - payloadStart)  // memmove
            (base + headerStart).copyMemory(from: block.baseAddress!, byteCount: blockSize)
            buffer[0] |= 0x10
            return RTPPacketView(packet, oneByteExtensionEndingAt: newPayloadStart, count: newCount)
        }
    }
}
