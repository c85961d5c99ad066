/// An RTP fixed header (RFC 3550 §5.1) with its CSRC list and extension, owned, for building packets.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |V=2|P|X|  CC   |M|     PT      |       sequence number         |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                           timestamp                           |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |           synchronization source (SSRC) identifier            |
/// +=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+
/// |            contributing source (CSRC) identifiers             |
/// |                             ....                              |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// The P and X bits and CC are not stored: they follow from the padding the
/// serialiser is asked to add, ``headerExtension`` and ``csrcs``.
/// Received packets are read with ``RTPPacketView``, which does not copy.
public struct RTPHeader: Sendable, Hashable {
    public static let version: UInt8 = 2
    public static let fixedSize = 12

    public var marker: Bool
    /// 7 bits. Parley's Opus uses ``opusPayloadType``, its redundant audio ``redPayloadType``.
    public var payloadType: UInt8
    public var sequenceNumber: UInt16
    public var timestamp: UInt32
    public var ssrc: UInt32
    /// At most 15.
    public var csrcs: [UInt32]
    public var headerExtension: RTPHeaderExtension?

    /// The dynamic payload type Parley uses for Opus (RFC 7587 leaves the number to signalling).
    public static let opusPayloadType: UInt8 = 111
    /// The dynamic payload type Parley uses for RFC 2198 redundant audio (``REDPayload``)
    /// whose blocks are Opus: the number WebRTC gives "red" for Opus.
    public static let redPayloadType: UInt8 = 63

    public init(
        marker: Bool = false,
        payloadType: UInt8,
        sequenceNumber: UInt16,
        timestamp: UInt32,
        ssrc: UInt32,
        csrcs: [UInt32] = [],
        headerExtension: RTPHeaderExtension? = nil
    ) {
        self.marker = marker
        self.payloadType = payloadType
        self.sequenceNumber = sequenceNumber
        self.timestamp = timestamp
        self.ssrc = ssrc
        self.csrcs = csrcs
        self.headerExtension = headerExtension
    }

    /// Copies the header out of a received packet.
    public init(_ view: RTPPacketView) {
        self.init(
            marker: view.marker,
            payloadType: view.payloadType,
            sequenceNumber: view.sequenceNumber,
            timestamp: view.timestamp,
            ssrc: view.ssrc,
            csrcs: (0..<view.csrcCount).map { view.csrc(at: $0) },
            headerExtension: view.headerExtension
        )
    }

    /// Bytes the header takes: fixed part, CSRCs and extension block.
    public var serializedSize: Int {
        Self.fixedSize + 4 * csrcs.count + (headerExtension?.serializedSize ?? 0)
    }

    /// Bytes a whole packet with this header takes.
    public func serializedSize(payloadCount: Int, paddingCount: Int = 0) -> Int {
        serializedSize + payloadCount + paddingCount
    }

    /// Writes the header alone, for a caller that encodes the payload in place after it.
    /// Pass `hasPadding` when the caller will append RFC 3550 padding.
    public func write(to writer: inout ByteWriter, hasPadding: Bool = false) throws(WireError) {
        guard csrcs.count <= 15 else { throw .malformed(.rtpHeader, reason: "more than 15 CSRCs") }
        guard payloadType <= 0x7F else { throw .malformed(.rtpHeader, reason: "payload type exceeds 7 bits") }
        var first: UInt8 = Self.version << 6 | UInt8(csrcs.count)
        if hasPadding { first |= 0x20 }
        if headerExtension != nil { first |= 0x10 }
        try writer.write(first)
        try writer.write((marker ? 0x80 : 0) | payloadType)
        try writer.write(sequenceNumber)
        try writer.write(timestamp)
        try writer.write(ssrc)
        for csrc in csrcs { try writer.write(csrc) }
        try headerExtension?.write(to: &writer)
    }

    /// Writes a whole packet: header, payload and `paddingCount` bytes of padding
    /// (0, or 1–255 with the count in the last byte as RFC 3550 §5.1 requires).
    /// Returns the number of bytes written.
    @discardableResult
    public func serialize(
        payload: UnsafeRawBufferPointer,
        paddingCount: Int = 0,
        into buffer: UnsafeMutableRawBufferPointer
    ) throws(WireError) -> Int {
        guard (0...255).contains(paddingCount) else {
            throw .malformed(.rtpPadding, reason: "padding must be 0 to 255 bytes")
        }
        var writer = ByteWriter(buffer)
        try writer.write(payload: payload, header: self, paddingCount: paddingCount)
        return writer.offset
    }

    /// The packet as a new array; convenient off the hot path.
    public func serialized(payload: [UInt8], paddingCount: Int = 0) throws(WireError) -> [UInt8] {
        let size = serializedSize(payloadCount: payload.count, paddingCount: paddingCount)
        return try [UInt8](serializedSize: size) { (writer: inout ByteWriter) throws(WireError) in
            guard (0...255).contains(paddingCount) else {
                throw .malformed(.rtpPadding, reason: "padding must be 0 to 255 bytes")
            }
            var failure: WireError?
            payload.withUnsafeBytes { raw in
                do throws(WireError) { try writer.write(payload: raw, header: self, paddingCount: paddingCount) }
                catch { failure = error }
            }
            if let failure { throw failure }
        }
    }
}

extension ByteWriter {
    fileprivate mutating func write(
        payload: UnsafeRawBufferPointer,
        header: RTPHeader,
        paddingCount: Int
    ) throws(WireError) {
        try header.write(to: &self, hasPadding: paddingCount > 0)
        try write(payload)
        if paddingCount > 0 {
            try writeZeros(paddingCount - 1)
            try write(UInt8(paddingCount))
        }
    }
}
