import ParleyDatagrams
import ParleyWire

/// One datagram a loop read, classified once where it entered: its bytes stay in the read
/// batch's slot, and what the relay learns of them travels with them (the kind, the sealed
/// header, the source), so nothing downstream reads or parses them again. Opening a sealed
/// datagram narrows it, in place, to the packet inside.
///
/// Valid only until the loop's next read: the slot is reused then.
struct InboundDatagram {
    /// The datagram's bytes in the read batch; once opened, the packet inside.
    private(set) var bytes: UnsafeMutableRawBufferPointer
    /// What its first bytes say it is (RFC 7983); once opened, what the packet inside is.
    private(set) var kind: PacketKind
    /// Its size on the wire: an answer to it is never larger.
    let wireSize: Int
    /// Where it came from, as the kernel wrote it (answers go there) and as a table key.
    let source: DatagramAddress
    let peer: PeerAddress
    /// A sealed packet's header, read once: its receiver index names the trunk it belongs to,
    /// and its counter is what opening checks against the replay window.
    let sealedHeader: SealedHeader?

    init(bytes: UnsafeMutableRawBufferPointer, source: DatagramAddress, peer: PeerAddress) {
        self.bytes = bytes
        self.source = source
        self.peer = peer
        wireSize = bytes.count
        let readable = UnsafeRawBufferPointer(bytes)
        kind = PacketKind(readable)
        sealedHeader = kind == .sealed ? try? SealedHeader(parsing: readable) : nil
    }

    /// The bytes to read.
    @inline(__always) var readable: UnsafeRawBufferPointer { UnsafeRawBufferPointer(bytes) }

    /// The transport opened the datagram: the packet inside is `count` bytes from `offset`.
    @inline(__always)
    mutating func opened(at offset: Int, count: Int) {
        bytes = UnsafeMutableRawBufferPointer(rebasing: bytes[offset..<(offset + count)])
        kind = PacketKind(readable)
    }

    /// The authentication tag of a sealed datagram, which a "not joined" answer echoes so the
    /// client knows it is about its own packet; empty for anything else, and once opened (the
    /// bytes are then the packet inside, whose tail is no tag).
    var sealedTag: [UInt8] {
        guard kind == .sealed, sealedHeader != nil, bytes.count >= SealedHeader.overhead else { return [] }
        return Array(readable[(bytes.count - SealedHeader.tagSize)...])
    }
}
