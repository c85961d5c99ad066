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
    public let payloadType: UInt8
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

extension RTPPacketView {
    /// Parses `bytes` and hands the view to `body`, for callers that hold an array.
    public static func withParsed<Result>(
        _ bytes: [UInt8],
        _ body: (RTPPacketView) throws -> Result
    ) throws -> Result {
        try bytes.withUnsafeBytes { raw in try body(try RTPPacketView(parsing: raw)) }
    }
}
