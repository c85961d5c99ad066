extension REDPayload {
    /// Adds one redundant block to the RED payload of `packet` (the caller has checked that its
    /// payload type is RED), in place in `buffer`, the memory it was parsed from: its header
    /// among the others by age (oldest first, as Parley's senders and Chromium order them), its
    /// data among theirs, under the primary's payload type. The packet may grow up to
    /// `buffer.count`; its header, the other blocks and the primary are unchanged.
    ///
    /// Returns the packet's new length, or nil (the packet untouched) when it has padding or
    /// not a well-formed RED payload, when it already carries a block `timestampOffset` back,
    /// when the offset or the block's length is more than RED can say, or when the buffer has
    /// no room. `block` must not lie in `buffer`. Nothing is allocated.
    public static func insert(
        _ block: UnsafeRawBufferPointer, timestampOffset: UInt16, into packet: RTPPacketView, in buffer: UnsafeMutableRawBufferPointer
    ) -> Int? {
        packet.requireParsed(from: buffer)
        let count = packet.bytes.count
        guard (1...maximumTimestampOffset).contains(timestampOffset), (1...maximumBlockLength).contains(block.count),
              buffer.count - count >= 4 + block.count, let base = buffer.baseAddress, let blockBase = block.baseAddress,
              packet.paddingCount == 0 else { return nil }
        let payloadStart = packet.payloadRange.lowerBound
        // Walk the headers: where the new one goes (before the first younger block) and how
        // much of the blocks' data comes before its data.
        var headerOffset = payloadStart
        var insertionHeader: Int?
        var dataBefore = 0
        var dataTotal = 0
        while true {
            guard headerOffset < count else { return nil }
            let first = buffer[headerOffset]
            if first & 0x80 == 0 { break }  // the primary's one-byte header
            guard count - headerOffset >= 4 else { return nil }
            let rest = UInt32(buffer[headerOffset + 1]) << 16 | UInt32(buffer[headerOffset + 2]) << 8 | UInt32(buffer[headerOffset + 3])
            let offset = UInt16(truncatingIfNeeded: rest >> 10)
            let length = Int(rest & 0x3FF)
            if offset == timestampOffset { return nil }
            if insertionHeader == nil {
                if offset < timestampOffset { insertionHeader = headerOffset } else { dataBefore += length }
            }
            dataTotal += length
            headerOffset += 4
        }
        let primaryHeader = headerOffset
        let dataStart = primaryHeader + 1
        // The blocks' lengths must fit what follows the headers (each is at most 1,023, and
        // there are at most count / 4 of them: no overflow).
        guard dataTotal <= count - dataStart else { return nil }
        let headerAt = insertionHeader ?? primaryHeader
        let dataAt = dataStart + dataBefore
        let grown = 4 + block.count
        // The data from the insertion point on moves by the header and the block; the headers
        // from the insertion point to the data move by the header alone.
        (base + dataAt + grown).copyMemory(from: base + dataAt, byteCount: count - dataAt)  // memmove
        (base + headerAt + 4).copyMemory(from: base + headerAt, byteCount: dataAt - headerAt)
        (base + dataAt + 4).copyMemory(from: blockBase, byteCount: block.count)
        buffer[headerAt] = 0x80 | buffer[primaryHeader + 4] & 0x7F
        let rest = UInt32(timestampOffset) << 10 | UInt32(block.count)
        buffer[headerAt + 1] = UInt8(truncatingIfNeeded: rest >> 16)
        buffer[headerAt + 2] = UInt8(truncatingIfNeeded: rest >> 8)
        buffer[headerAt + 3] = UInt8(truncatingIfNeeded: rest)
        return count + grown
    }
}
