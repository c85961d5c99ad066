import ParleyWire

/// Hands every input to every ParleyWire parser. A parser may accept or reject the bytes;
/// it must never trap, and what it accepts must write back and read back the same.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzWire(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    _ = PacketKind(bytes)

    if let view = try? RTPPacketView(parsing: bytes) {
        _ = view.audioLevel
        for element in view.headerExtensionElements { _ = element.data.count }
        let header = RTPHeader(view)
        let rewritten = try! header.serialized(payload: Array(view.payload), paddingCount: view.paddingCount)
        let again = rewritten.withUnsafeBytes { try! RTPHeader(RTPPacketView(parsing: $0)) }
        precondition(again == header, "RTP header changed in a round trip")
    }
    if let packets = try? RTCPCompoundPacket.parse(bytes), let rewritten = try? RTCPCompoundPacket.serialized(packets) {
        precondition(try! RTCPCompoundPacket.parse(rewritten) == packets, "RTCP changed in a round trip")
    }
    if let packet = try? OpusPacket(parsing: bytes) {
        precondition(packet.frames.allSatisfy { $0.upperBound <= size }, "Opus frame outside the packet")
        precondition(OpusPacket.sampleCount(bytes) == packet.sampleCount, "Opus sample count disagrees")
    }
    if let red = try? REDPayloadView(parsing: bytes) {
        var end = 1 + 4 * red.redundantCount
        for block in red {
            precondition(block.data.count <= REDPayload.maximumBlockLength, "RED block longer than its 10 bits allow")
            end += block.data.count
            _ = block.sequenceNumber(primarySequence: UInt16(truncatingIfNeeded: size), frameSamples: 960)
        }
        precondition(end + red.primary.data.count == size, "RED blocks do not tile the payload")
        precondition(try! OwnedREDPayload(red).serialized() == Array(bytes), "RED payload changed in a round trip")
    }
    if size >= RTPHeader.fixedSize {
        // The relay completes a browser's RED copy in place (REDPayload.insert): within the
        // buffer, the fixed header untouched, the block among blocks that still tile.
        let block: [UInt8] = [0xB1, 0xB2, 0xB3]
        var copy = Array(bytes) + [UInt8](repeating: 0, count: 4 + block.count)
        let grown = copy.withUnsafeMutableBytes { packet in
            block.withUnsafeBytes { REDPayload.insert($0, timestampOffset: 1_920, intoRTP: packet, count: size) }
        }
        if let grown {
            precondition(grown == size + 4 + block.count && copy.prefix(RTPHeader.fixedSize).elementsEqual(bytes.prefix(RTPHeader.fixedSize)),
                         "RED insertion moved the header or grew by the wrong amount")
            let found = copy.withUnsafeBytes { raw -> Bool in
                guard let view = try? RTPPacketView(parsing: UnsafeRawBufferPointer(rebasing: raw[0..<grown])),
                      let red = try? REDPayloadView(parsing: view.payload) else { return false }
                return red.contains { $0.timestampOffset == 1_920 && Array($0.data) == block }
            }
            precondition(found, "the inserted RED block does not read back")
        }
    }
    if let message = try? ControlMessage(parsing: bytes) {
        precondition(try! ControlMessage(parsing: message.serialized()) == message, "control message changed in a round trip")
    }
    if let hello = try? HandshakeHello(parsing: bytes) { precondition(size >= HandshakeHello.size && hello.nonce == hello.nonce) }
    if let cookie = try? HandshakeCookie(parsing: bytes) { precondition(cookie.cookie.count == HandshakeCookie.cookieSize) }
    if let message = try? HandshakeInit(parsing: bytes) {
        precondition(message.noiseMessage.count + HandshakeInit.headerSize == size, "init body outside the packet")
    }
    if let message = try? HandshakeResponse(parsing: bytes) {
        precondition(message.noiseMessage.count + HandshakeResponse.headerSize == size, "response body outside the packet")
    }
    if (try? SealedHeader(parsing: bytes)) != nil { precondition(size >= SealedHeader.overhead, "sealed packet shorter than its overhead") }
    if let message = try? STUNMessageView(parsing: bytes) {
        precondition(size == STUNMessageView.headerSize + Int(bytes[2]) << 8 + Int(bytes[3]), "STUN length disagrees with the datagram")
        if let integrity = message.integrity { precondition(message.withIntegrityInput { $0.count + $1.count } == integrity.offset) }
        if let fingerprint = message.fingerprint { precondition(fingerprint.offset + 8 == size, "FINGERPRINT is not last") }
        _ = message.hasValidFingerprint
    }
    if let records = DTLSRecordHeader.records(in: bytes) { precondition(records * DTLSRecordHeader.size <= size) }
    if let description = try? SessionDescription(parsing: bytes) {
        for section in description.media { _ = (section.rtpMaps, section.headerExtensions, section.fingerprints, section.ssrcs, section.setup) }
        precondition(try! SessionDescription(parsing: description.text) == description, "SDP changed in a round trip")
    }
    if let text = String(validating: bytes, as: UTF8.self), let invite = try? InviteURL(parsing: text) {
        precondition(try! InviteURL(parsing: invite.description) == invite, "invite changed in a round trip")
    }
    return 0
}
