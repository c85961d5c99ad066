import ParleyWire

/// What the relay builds and sends itself (replies, control messages, reports), through the
/// same send batch as forwarded media.
extension RelayWorker {
    /// To a stranger: plaintext, and never more than `limit` bytes.
    func sendControl(_ body: ControlMessage.Body, sequence: UInt32, to address: DatagramAddress, limit: Int?) {
        guard let bytes = ControlReply.message(body, sequence: sequence, limit: limit) else { return }
        send(bytes, to: address, kind: .control)
    }

    /// To a member: sealed with its keys on a secure relay (the seal adds the same overhead
    /// the member's own packet carried, so the limit compares plaintexts).
    func sendControl(_ body: ControlMessage.Body, sequence: UInt32, to session: Session, limit: Int?) {
        let overhead = session.protector.isSecure ? SealedHeader.overhead : 0
        guard let bytes = ControlReply.message(body, sequence: sequence, limit: limit.map { $0 - overhead }) else { return }
        send(bytes, to: session, kind: .control)
    }

    /// An error reply to a stranger, cut to `limit` bytes (``ControlReply/error(_:_:sequence:echo:limit:)``).
    func sendError(_ code: ControlMessage.ErrorCode, _ text: String, sequence: UInt32 = 0, echo: [UInt8] = [],
                   to address: DatagramAddress, limit: Int) {
        guard let bytes = ControlReply.error(code, text, sequence: sequence, echo: echo, limit: limit) else { return }
        send(bytes, to: address, kind: .control)
    }

    /// Plaintext bytes to an address: replies to strangers, and everything on an insecure relay.
    func send(_ bytes: [UInt8], to address: DatagramAddress, kind: SentKind) {
        send(bytes, to: address, protector: .plaintext, kind: kind)
    }

    /// Bytes for a member, sealed with its keys on a secure relay; a browser member's control
    /// messages go to its page's WebSocket instead.
    func send(_ bytes: [UInt8], to session: Session, kind: SentKind) {
        if kind == .control, let browser = session.browser {
            return sendToPage(bytes, member: browser.member, session: session)
        }
        send(bytes, to: session.address, protector: session.protector, kind: kind)
    }
}
