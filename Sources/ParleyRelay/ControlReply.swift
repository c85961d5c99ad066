import ParleyWire

/// Control messages the relay answers with, serialized within a size limit: an answer to a
/// datagram is never larger than the datagram, so the relay cannot be used to amplify a
/// flood aimed at a forged source address.
enum ControlReply {
    /// The message's bytes, or nil when they would exceed `limit`.
    static func message(_ body: ControlMessage.Body, sequence: UInt32, limit: Int?) -> [UInt8]? {
        guard let bytes = try? ControlMessage(sequence: sequence, body: body).serialized() else { return nil }
        if let limit, bytes.count > limit { return nil }
        return bytes
    }

    /// An error reply cut to `limit` bytes: the echo always fits or nothing is sent; the
    /// message text is shortened (at a character boundary) or dropped.
    static func error(_ code: ControlMessage.ErrorCode, _ text: String, sequence: UInt32 = 0, echo: [UInt8] = [], limit: Int) -> [UInt8]? {
        let room = limit - ControlMessage.headerSize - 3 - (echo.isEmpty ? 0 : 1 + echo.count)
        guard room >= 0 else { return nil }
        let fitted = text.prefix(utf8Bytes: min(room, ControlMessage.maximumShortTextBytes))
        return message(.error(ControlMessage.ErrorReply(code: code, message: fitted, echo: echo)), sequence: sequence, limit: limit)
    }
}
