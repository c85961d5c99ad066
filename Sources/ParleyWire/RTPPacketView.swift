/// A received RTP packet, validated and read in place: nothing is copied.
///
/// `RTPPacketView(parsing:)` checks the whole layout once — version, CSRC count,
/// extension length and every RFC 8285 element in it, padding — so that every
/// accessor afterwards is a plain load. The view borrows `bytes` and must not be
/// used after they go away (use it inside the caller's `withUnsafeBytes`).
///
/// See ``RTPHeader`` for the bit layout.
public struct RTPPacketView {
    /// The whole datagram the view was parsed from.
    public let bytes: UnsafeRawBufferPointer
    public let marker: Bool
    /// Changed only by ``rewritingPayloadType(_:in:)``, which writes the packet too.
    public private(set) var payloadType: UInt8
    public let sequenceNumber: UInt16
    public let timestamp: UInt32
    public let ssrc: UInt32
    public let csrcCount: Int
    /// Where the payload starts and ends in ``bytes``.
    public let payloadRange: Range<Int>
    /// Bytes of RFC 3550 padding at the end (0 when the P bit is clear).
    public let paddingCount: Int
    /// The extension block's profile word, when the X bit is set.
    public let extensionProfile: UInt16?
    /// The extension block's data (after its 4-byte header), when the X bit is set.
    public let extensionData: UnsafeRawBufferPointer?

    public init(parsing bytes: UnsafeRawBufferPointer) throws(WireError) {
        var reader = ByteReader(bytes, element: .rtpHeader)
        let first = try reader.readUInt8()
        guard first >> 6 == RTPHeader.version else {
            throw .malformed(.rtpHeader, reason: "version is not 2")
        }
        let hasPadding = first & 0x20 != 0
        let hasExtension = first & 0x10 != 0
        let second = try reader.readUInt8()
        self.bytes = bytes
        self.marker = second & 0x80 != 0
        self.payloadType = second & 0x7F
        self.sequenceNumber = try reader.readUInt16()
        self.timestamp = try reader.readUInt32()
        self.ssrc = try reader.readUInt32()

        self.csrcCount = Int(first & 0x0F)
        reader.element = .rtpCSRCList
        try reader.skip(4 * csrcCount)

        if hasExtension {
            reader.element = .rtpHeaderExtension
            let profile = try reader.readUInt16()
            let words = Int(try reader.readUInt16())
            let data = try reader.readBytes(4 * words)
            if profile == RTPHeaderExtension.oneByteProfile {
                try RTPHeaderExtensionElements.validate(data, oneByteForm: true)
            } else if profile & RTPHeaderExtension.twoByteProfileMask == RTPHeaderExtension.twoByteProfile {
                try RTPHeaderExtensionElements.validate(data, oneByteForm: false)
            }
            self.extensionProfile = profile
            self.extensionData = data
        } else {
            self.extensionProfile = nil
            self.extensionData = nil
        }

        let headerEnd = reader.offset
        if hasPadding {
            // RFC 3550 §5.1: the last octet counts the padding, itself included.
            let count = Int(bytes[bytes.count - 1])  // bytes is non-empty: we read 12 already
            guard count > 0 else { throw .malformed(.rtpPadding, reason: "padding count is zero") }
            guard headerEnd + count <= bytes.count else {
                throw .malformed(.rtpPadding, reason: "padding is longer than the packet body")
            }
            self.paddingCount = count
        } else {
            self.paddingCount = 0
        }
        self.payloadRange = headerEnd..<(bytes.count - paddingCount)
    }

    /// The payload, a slice of ``bytes``.
    public var payload: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: bytes[payloadRange]) }

    /// Bytes before the payload: fixed header, CSRCs, extension.
    public var headerSize: Int { payloadRange.lowerBound }

    /// The CSRC at `index`, which must be below ``csrcCount``.
    public func csrc(at index: Int) -> UInt32 {
        precondition(index >= 0 && index < csrcCount, "CSRC index out of range")
        return UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: RTPHeader.fixedSize + 4 * index, as: UInt32.self))
    }

    /// The RFC 8285 elements of the extension block, read in place; empty when there is
    /// no block or it is not in an RFC 8285 form.
    public var headerExtensionElements: RTPHeaderExtensionElements {
        guard let extensionProfile, let extensionData else {
            return RTPHeaderExtensionElements(data: UnsafeRawBufferPointer(start: nil, count: 0), oneByteForm: true)
        }
        if extensionProfile == RTPHeaderExtension.oneByteProfile {
            return RTPHeaderExtensionElements(data: extensionData, oneByteForm: true)
        }
        if extensionProfile & RTPHeaderExtension.twoByteProfileMask == RTPHeaderExtension.twoByteProfile {
            return RTPHeaderExtensionElements(data: extensionData, oneByteForm: false)
        }
        return RTPHeaderExtensionElements(data: UnsafeRawBufferPointer(start: nil, count: 0), oneByteForm: true)
    }

    /// The RFC 6464 audio level, if the packet carries a well-formed one.
    public var audioLevel: AudioLevel? {
        for element in headerExtensionElements where element.id == AudioLevel.extensionID {
            return try? AudioLevel(elementData: element.data)
        }
        return nil
    }

    /// The extension block as an owned value (allocates; for tests and tools).
    public var headerExtension: RTPHeaderExtension? {
        guard let extensionProfile, let extensionData else { return nil }
        let isOneByte = extensionProfile == RTPHeaderExtension.oneByteProfile
        let isTwoByte = extensionProfile & RTPHeaderExtension.twoByteProfileMask == RTPHeaderExtension.twoByteProfile
        guard isOneByte || isTwoByte else {
            return .opaque(profile: extensionProfile, data: Array(extensionData))
        }
        let elements = headerExtensionElements.map { RTPHeaderExtensionElement(id: $0.id, data: Array($0.data)) }
        return .elements(elements, appBits: isTwoByte ? UInt8(extensionProfile & 0x0F) : 0)
    }
}

// MARK: Editing the packet in place

/// A caller that edits a packet in place (the relay, making a browser's copy) parses it once
/// and hands the view on from edit to edit: each edit reads the layout from the view instead
/// of parsing again, and returns the view of what it wrote. The view is read-only; the
/// mutable memory it was parsed from travels beside it as `buffer`.
extension RTPPacketView {
    /// Traps unless the view was parsed from the first bytes of `buffer`, which an edit may
    /// write: a mismatch is the caller's mistake, never the network's.
    @inline(__always)
    public func requireParsed(from buffer: UnsafeMutableRawBufferPointer) {
        precondition(bytes.baseAddress == UnsafeRawPointer(buffer.baseAddress) && bytes.count <= buffer.count,
                     "the RTP view was not parsed from this buffer's first bytes")
    }

    /// Writes `payloadType` into the packet's header in `buffer` (the memory the view was
    /// parsed from); the view of the packet as it is now. Nothing else changes.
    public func rewritingPayloadType(_ payloadType: UInt8, in buffer: UnsafeMutableRawBufferPointer) -> RTPPacketView {
        requireParsed(from: buffer)
        buffer[1] = buffer[1] & 0x80 | payloadType & 0x7F
        var view = self
        view.payloadType = payloadType & 0x7F
        return view
    }

    /// The view of this packet after an edit that replaced its header extension with a
    /// one-byte-form block and moved the payload and padding to follow it: `count` bytes from
    /// the same start now, the payload starting at `payloadStart`.
    init(_ packet: RTPPacketView, oneByteExtensionEndingAt payloadStart: Int, count: Int) {
        let extensionStart = RTPHeader.fixedSize + 4 * packet.csrcCount
        let bytes = UnsafeRawBufferPointer(start: packet.bytes.baseAddress, count: count)
        self.bytes = bytes
        marker = packet.marker
        payloadType = packet.payloadType
        sequenceNumber = packet.sequenceNumber
        timestamp = packet.timestamp
        ssrc = packet.ssrc
        csrcCount = packet.csrcCount
        paddingCount = packet.paddingCount
        payloadRange = payloadStart..<(count - packet.paddingCount)
        extensionProfile = RTPHeaderExtension.oneByteProfile
        extensionData = UnsafeRawBufferPointer(rebasing: bytes[(extensionStart + 4)..<payloadStart])
    }
}

extension RTPPacketView {
    /// Parses `bytes` and hands the view to `body`, for callers that hold an array.
    public static func withParsed<Result>(
        _ bytes: [UInt8],
        _ body: (RTPPacketView) throws -> Result
    ) throws -> Result {
        try bytes.withUnsafeBytes { raw in try body(try RTPPacketView(parsing: raw)) }
    }
}
