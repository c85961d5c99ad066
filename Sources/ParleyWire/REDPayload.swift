/// Redundant audio data (RFC 2198): an RTP payload that carries earlier frames again, before
/// the current ("primary") one, so that a receiver which lost the packets those frames first
/// travelled in can still play them. The RTP header is the primary's; each redundant block
/// says how much earlier its frame was (a timestamp offset) and how long it is.
///
/// One header per redundant block:
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |F|   block PT  |  timestamp offset         |   block length    |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// then the primary's, the last one, which is a single byte:
///
/// ```
///  0 1 2 3 4 5 6 7
/// +-+-+-+-+-+-+-+-+
/// |0|   Block PT  |
/// +-+-+-+-+-+-+-+-+
/// ```
///
/// then the blocks' data in the same order, the primary's last, taking what remains. `F` is
/// set on every header but the last. A block's timestamp is the RTP timestamp minus its
/// offset (14 bits, so at most 16,383 samples back); its length is 10 bits (at most 1,023
/// bytes). The payload types are those of the blocks' own encodings (Opus in Parley).
///
/// ``REDPayloadView`` reads a received payload in place; ``REDPayload`` writes one, from
/// borrowed bytes on the sender's path or from an owned value in tests and tools.
public enum REDPayload {
    /// The largest timestamp offset a redundant block can carry (14 bits).
    public static let maximumTimestampOffset: UInt16 = 0x3FFF
    /// The largest redundant block (10 bits of length).
    public static let maximumBlockLength = 0x3FF

    /// One block: an encoded frame, its payload type and how far before the packet's
    /// timestamp it starts. The bytes are borrowed; the primary's offset is 0.
    public struct Block {
        public var payloadType: UInt8
        public var timestampOffset: UInt16
        public var data: UnsafeRawBufferPointer

        public init(payloadType: UInt8, timestampOffset: UInt16, data: UnsafeRawBufferPointer) {
            self.payloadType = payloadType
            self.timestampOffset = timestampOffset
            self.data = data
        }
    }

    /// Bytes a payload with these redundant blocks and a primary of `primaryCount` bytes takes.
    public static func serializedSize(redundant: [Block], primaryCount: Int) -> Int {
        var size = 1 + primaryCount
        for index in redundant.indices { size += 4 + redundant[index].data.count }
        return size
    }

    /// Writes the payload: the redundant blocks' headers (oldest first, as the caller orders
    /// them), the primary's, then every block's data.
    ///
    /// The blocks come as an array, not any collection: the sender calls this from another
    /// module for every packet, where a generic version runs unspecialised and its iterator
    /// costs a heap allocation per packet. Indexing a concrete array allocates nothing.
    public static func write(redundant: [Block], primary: Block, to writer: inout ByteWriter) throws(WireError) {
        guard primary.payloadType <= 0x7F else { throw .malformed(.redPayload, reason: "payload type exceeds 7 bits") }
        for index in redundant.indices {
            let block = redundant[index]
            guard block.payloadType <= 0x7F else { throw .malformed(.redPayload, reason: "payload type exceeds 7 bits") }
            guard block.timestampOffset <= maximumTimestampOffset else {
                throw .malformed(.redPayload, reason: "timestamp offset exceeds 14 bits")
            }
            guard block.data.count <= maximumBlockLength else {
                throw .malformed(.redPayload, reason: "redundant block longer than 1023 bytes")
            }
            try writer.write(0x80 | block.payloadType)
            // 14 bits of offset, then 10 of length, big-endian.
            try writer.writeUInt24(UInt32(block.timestampOffset) << 10 | UInt32(block.data.count))
        }
        try writer.write(primary.payloadType)
        for index in redundant.indices { try writer.write(redundant[index].data) }
        try writer.write(primary.data)
    }
}

/// A received RED payload, validated and read in place: nothing is copied.
///
/// `REDPayloadView(parsing:)` walks every header once and checks that the blocks' lengths
/// fit, so iterating the redundant blocks afterwards cannot fail or read past the payload.
/// See ``REDPayload`` for the layout.
public struct REDPayloadView: Sequence {
    /// The payload the view was parsed from.
    public let bytes: UnsafeRawBufferPointer
    /// The current frame: the one the RTP header's timestamp and sequence number are about.
    public let primary: REDPayload.Block
    /// Redundant blocks before the primary.
    public let redundantCount: Int

    public init(parsing bytes: UnsafeRawBufferPointer) throws(WireError) {
        var reader = ByteReader(bytes, element: .redPayload)
        var redundantBytes = 0
        var count = 0
        while true {
            let first = try reader.readUInt8()
            guard first & 0x80 != 0 else {
                // The primary's header: its data is what the redundant blocks leave.
                guard redundantBytes <= reader.remaining else {
                    throw .truncated(.redPayload, needed: reader.offset + redundantBytes, available: bytes.count)
                }
                self.bytes = bytes
                self.redundantCount = count
                let start = reader.offset + redundantBytes
                primary = REDPayload.Block(
                    payloadType: first, timestampOffset: 0, data: UnsafeRawBufferPointer(rebasing: bytes[start...]))
                return
            }
            let rest = try reader.readUInt24()
            redundantBytes += Int(rest & 0x3FF)
            count += 1
        }
    }

    /// The redundant blocks, in the order the payload lists them (the sender's choice;
    /// Parley's puts the oldest first).
    public struct Iterator: IteratorProtocol {
        let bytes: UnsafeRawBufferPointer
        var remaining: Int
        var headerOffset = 0
        var dataOffset: Int

        public mutating func next() -> REDPayload.Block? {
            guard remaining > 0 else { return nil }
            remaining -= 1
            let first = bytes[headerOffset]
            let rest = UInt32(bytes[headerOffset + 1]) << 16 | UInt32(bytes[headerOffset + 2]) << 8 | UInt32(bytes[headerOffset + 3])
            headerOffset += 4
            let length = Int(rest & 0x3FF)
            let start = dataOffset
            dataOffset += length
            return REDPayload.Block(
                payloadType: first & 0x7F, timestampOffset: UInt16(truncatingIfNeeded: rest >> 10),
                data: UnsafeRawBufferPointer(rebasing: bytes[start..<start + length]))
        }
    }

    public func makeIterator() -> Iterator {
        Iterator(bytes: bytes, remaining: redundantCount, dataOffset: 4 * redundantCount + 1)
    }
}

extension REDPayload.Block {
    /// The sequence number of the packet this redundant block's frame first travelled in,
    /// derived from the packet's (`primarySequence`) and the frames between them: `offset /
    /// frameSamples`. nil when that is not a whole number of frames, or the offset is 0 (a
    /// copy of the primary itself).
    ///
    /// This holds for a sender that repeats only frames sent in consecutive packets with
    /// consecutive timestamps (Parley's clears its history at every silence and every
    /// pause), so that frames and sequence numbers advance together. Any values a peer
    /// sends give a number or nil; none traps.
    public func sequenceNumber(primarySequence: UInt16, frameSamples: Int) -> UInt16? {
        guard frameSamples > 0, timestampOffset > 0, Int(timestampOffset) % frameSamples == 0 else { return nil }
        return primarySequence &- UInt16(truncatingIfNeeded: Int(timestampOffset) / frameSamples)
    }
}

/// An RFC 2198 payload as an owned value, for tests, tools and round trips.
public struct OwnedREDPayload: Sendable, Hashable {
    public struct Block: Sendable, Hashable {
        public var payloadType: UInt8
        public var timestampOffset: UInt16
        public var data: [UInt8]

        public init(payloadType: UInt8, timestampOffset: UInt16, data: [UInt8]) {
            self.payloadType = payloadType
            self.timestampOffset = timestampOffset
            self.data = data
        }
    }

    public var redundant: [Block]
    /// The primary's timestamp offset is always 0.
    public var primary: Block

    public init(redundant: [Block], primary: Block) {
        self.redundant = redundant
        self.primary = primary
    }

    /// Copies a parsed payload.
    public init(_ view: REDPayloadView) {
        redundant = view.map { Block(payloadType: $0.payloadType, timestampOffset: $0.timestampOffset, data: Array($0.data)) }
        primary = Block(payloadType: view.primary.payloadType, timestampOffset: 0, data: Array(view.primary.data))
    }

    public init(parsing bytes: [UInt8]) throws(WireError) {
        var result: Result<OwnedREDPayload, WireError>!
        bytes.withUnsafeBytes { raw in
            do throws(WireError) { result = .success(OwnedREDPayload(try REDPayloadView(parsing: raw))) } catch { result = .failure(error) }
        }
        self = try result.get()
    }

    public var serializedSize: Int { redundant.reduce(1 + primary.data.count) { $0 + 4 + $1.data.count } }

    public func serialized() throws(WireError) -> [UInt8] {
        // Borrow every block's bytes from one contiguous copy, then write as the sender does.
        let all = redundant.flatMap(\.data) + primary.data
        return try [UInt8](serializedSize: serializedSize) { (writer: inout ByteWriter) throws(WireError) in
            var failure: WireError?
            all.withUnsafeBytes { raw in
                var start = 0
                var blocks: [REDPayload.Block] = []
                for block in redundant {
                    blocks.append(REDPayload.Block(
                        payloadType: block.payloadType, timestampOffset: block.timestampOffset,
                        data: UnsafeRawBufferPointer(rebasing: raw[start..<start + block.data.count])))
                    start += block.data.count
                }
                let primaryBlock = REDPayload.Block(
                    payloadType: primary.payloadType, timestampOffset: 0, data: UnsafeRawBufferPointer(rebasing: raw[start...]))
                do throws(WireError) { try REDPayload.write(redundant: blocks, primary: primaryBlock, to: &writer) } catch { failure = error }
            }
            if let failure { throw failure }
        }
    }
}
