/// An RTP header extension block (RFC 3550 §5.3.1), in one of the RFC 8285 forms or opaque.
///
/// RFC 3550 allows one extension block after the CSRC list:
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |      defined by profile       |           length              |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                        header extension                       |
/// |                             ....                              |
/// ```
///
/// `length` counts 32-bit words after this 4-byte header. RFC 8285 fills the block
/// with elements, each an ID and some bytes. The one-byte form (profile 0xBEDE, §4.2)
/// fits IDs 1–14 and 1–16 bytes of data:
///
/// ```
///  0 1 2 3 4 5 6 7
/// +-+-+-+-+-+-+-+-+
/// |  ID   |  len  |   len = data bytes - 1; ID 0 is a padding byte, ID 15 stops parsing
/// +-+-+-+-+-+-+-+-+
/// ```
///
/// The two-byte form (profile 0x100 in the top 12 bits, 4 "appbits" below, §4.3) fits
/// IDs 1–255 and 0–255 bytes of data, as an ID byte then a length byte; ID 0 is padding.
public enum RTPHeaderExtension: Sendable, Hashable {
    /// RFC 8285 elements; the serialiser picks the one-byte form when every element
    /// fits it and `appBits` is 0, the two-byte form otherwise.
    case elements([RTPHeaderExtensionElement], appBits: UInt8 = 0)
    /// A block from some other profile, kept as its profile word and data (a whole
    /// number of 32-bit words).
    case opaque(profile: UInt16, data: [UInt8])

    public static let oneByteProfile: UInt16 = 0xBEDE
    /// The top 12 bits of a two-byte-form profile word; the low 4 bits are "appbits".
    public static let twoByteProfileMask: UInt16 = 0xFFF0
    public static let twoByteProfile: UInt16 = 0x1000

    /// The 4-byte block header plus the data padded to a 32-bit boundary.
    public var serializedSize: Int {
        switch self {
        case let .elements(elements, appBits):
            let data = Self.usesOneByteForm(elements, appBits: appBits)
                ? elements.reduce(0) { $0 + 1 + $1.data.count }
                : elements.reduce(0) { $0 + 2 + $1.data.count }
            return 4 + (data + 3) / 4 * 4
        case let .opaque(_, data):
            return 4 + (data.count + 3) / 4 * 4
        }
    }

    /// The element with `id`, if the block is in an RFC 8285 form and has one.
    public func element(id: UInt8) -> RTPHeaderExtensionElement? {
        guard case let .elements(elements, _) = self else { return nil }
        return elements.first { $0.id == id }
    }

    public func write(to writer: inout ByteWriter) throws(WireError) {
        switch self {
        case let .elements(elements, appBits):
            let oneByte = Self.usesOneByteForm(elements, appBits: appBits)
            guard appBits <= 0x0F else {
                throw .malformed(.rtpHeaderExtension, reason: "two-byte appbits must fit in 4 bits")
            }
            let dataSize = serializedSize - 4
            try writer.write(oneByte ? Self.oneByteProfile : Self.twoByteProfile | UInt16(appBits))
            try writer.write(UInt16(dataSize / 4))
            var written = 0
            for element in elements {
                if oneByte {
                    try writer.write(element.id << 4 | UInt8(element.data.count - 1))
                    written += 1
                } else {
                    guard element.id != 0 else {
                        throw .malformed(.rtpHeaderExtension, reason: "element ID 0 is reserved for padding")
                    }
                    guard element.data.count <= 255 else {
                        throw .malformed(.rtpHeaderExtension, reason: "element data longer than 255 bytes")
                    }
                    try writer.write(element.id)
                    try writer.write(UInt8(element.data.count))
                    written += 2
                }
                try writer.write(contentsOf: element.data)
                written += element.data.count
            }
            try writer.writeZeros(dataSize - written)
        case let .opaque(profile, data):
            guard data.count % 4 == 0, data.count / 4 <= Int(UInt16.max) else {
                throw .malformed(.rtpHeaderExtension, reason: "opaque data must be whole 32-bit words")
            }
            try writer.write(profile)
            try writer.write(UInt16(data.count / 4))
            try writer.write(contentsOf: data)
        }
    }

    /// The one-byte form is used whenever it can hold every element and no appbits are asked for.
    private static func usesOneByteForm(_ elements: [RTPHeaderExtensionElement], appBits: UInt8) -> Bool {
        appBits == 0 && elements.allSatisfy { (1...14).contains($0.id) && (1...16).contains($0.data.count) }
    }
}

/// One RFC 8285 element, owned: for building packets.
public struct RTPHeaderExtensionElement: Sendable, Hashable {
    public var id: UInt8
    public var data: [UInt8]

    public init(id: UInt8, data: [UInt8]) {
        self.id = id
        self.data = data
    }
}

/// The elements of a received extension block, read in place.
///
/// Built only by ``RTPPacketView``, which has already walked the block once and
/// rejected anything malformed, so iterating cannot fail.
public struct RTPHeaderExtensionElements: Sequence {
    /// The block's data, after its 4-byte header.
    let data: UnsafeRawBufferPointer
    let oneByteForm: Bool

    /// An element borrowed from the packet's bytes.
    public struct Element {
        public let id: UInt8
        public let data: UnsafeRawBufferPointer
    }

    public struct Iterator: IteratorProtocol {
        let data: UnsafeRawBufferPointer
        let oneByteForm: Bool
        var offset = 0

        public mutating func next() -> Element? {
            while offset < data.count {
                let first = data[offset]
                if oneByteForm {
                    let id = first >> 4
                    if id == 0 { offset += 1; continue }  // padding byte
                    if id == 15 { offset = data.count; return nil }  // reserved: stop
                    let length = Int(first & 0x0F) + 1
                    let start = offset + 1
                    offset = start + length
                    return Element(id: id, data: UnsafeRawBufferPointer(rebasing: data[start..<start + length]))
                } else {
                    if first == 0 { offset += 1; continue }  // padding byte
                    let length = Int(data[offset + 1])
                    let start = offset + 2
                    offset = start + length
                    return Element(id: first, data: UnsafeRawBufferPointer(rebasing: data[start..<start + length]))
                }
            }
            return nil
        }
    }

    public func makeIterator() -> Iterator { Iterator(data: data, oneByteForm: oneByteForm) }

    /// Checks that every element lies inside `data`, so that iteration never reads past it.
    static func validate(_ data: UnsafeRawBufferPointer, oneByteForm: Bool) throws(WireError) {
        var offset = 0
        while offset < data.count {
            let first = data[offset]
            if oneByteForm {
                let id = first >> 4
                if id == 0 { offset += 1; continue }
                if id == 15 { return }
                offset += 1 + Int(first & 0x0F) + 1
            } else {
                if first == 0 { offset += 1; continue }
                guard offset + 1 < data.count else {
                    throw .truncated(.rtpHeaderExtension, needed: offset + 2, available: data.count)
                }
                offset += 2 + Int(data[offset + 1])
            }
            guard offset <= data.count else {
                throw .truncated(.rtpHeaderExtension, needed: offset, available: data.count)
            }
        }
    }
}
